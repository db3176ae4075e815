# The manager image: a static binary on distroless (no shell), as user
# 65532:65532. `make image` builds the same image without a Docker daemon
# (ko, .ko.yaml); with Docker:
#
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg VERSION=$(git describe --tags --always --dirty) \
#     --build-arg REVISION=$(git rev-parse HEAD) -t ghcr.io/sluice-dev/sluice:<tag> .
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=unknown
ARG REVISION=unknown
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY clientip/ clientip/
COPY cmd/ cmd/
COPY internal/ internal/
COPY webhook/ webhook/
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath \
    -ldflags "-s -w -X github.com/sluice-dev/sluice/internal/buildinfo.Version=${VERSION} -X github.com/sluice-dev/sluice/internal/buildinfo.Revision=${REVISION}" \
    -o /out/manager ./cmd/manager

FROM gcr.io/distroless/static:nonroot
ARG VERSION=unknown
ARG REVISION=unknown
LABEL org.opencontainers.image.source="https://github.com/sluice-dev/sluice" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.title="sluice"
COPY --from=build /out/manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
