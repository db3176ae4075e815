package grpcserver

import (
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
)

// metrics count gRPC answers by service and code. Decisions themselves
// are the Checker's metrics (sluice_decisions_total and the rest), shared
// with the HTTP endpoint; this counter tells the protocols apart.
type metrics struct {
	requests *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{requests: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_grpc_requests_total",
		Help: "gRPC checks answered, by service and the code of the answer's status, as grpc-go names it (ext_authz: OK allowed, ResourceExhausted rate limited, PermissionDenied denied otherwise, InvalidArgument unreadable, Internal failed; rate limit service: OK answered, OK or OVER_LIMIT, InvalidArgument unreadable, Internal failed).",
	}, []string{"service", "code"})}
	if reg != nil {
		reg.MustRegister(m.requests)
	}
	return m
}

func (m *metrics) answered(service string, code codes.Code) {
	m.requests.WithLabelValues(service, code.String()).Inc()
}
