module github.com/sluice-dev/sluice/test/gatewayapi/testdata/istiomesh

go 1.26

require (
	google.golang.org/protobuf v1.36.12
	istio.io/api v1.32.0
	sigs.k8s.io/yaml v1.6.0
)

require (
	github.com/golang/protobuf v1.5.4 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20251213004720-97cd9d5aeac2 // indirect
)
