# The manager image for people with Docker: the image `make image` builds
# without a daemon (hack/build-image.sh), from the same parts: a static
# binary at /manager on the base layer of hack/image-rootfs.sh (passwd and
# group with nonroot 65532, Mozilla's CA certificates, /tmp; no shell), run
# as 65532:65532, with the same environment and OCI labels.
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
# The base layer's files, from the build image's Debian ca-certificates.
COPY hack/image-rootfs.sh hack/
RUN hack/image-rootfs.sh /out/rootfs.tar && mkdir /out/rootfs && tar -xpf /out/rootfs.tar -C /out/rootfs
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY clientip/ clientip/
COPY cmd/ cmd/
COPY internal/ internal/
COPY webhook/ webhook/
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -buildvcs=false \
    -ldflags "-s -w -X github.com/sluice-dev/sluice/internal/buildinfo.Version=${VERSION} -X github.com/sluice-dev/sluice/internal/buildinfo.Revision=${REVISION}" \
    -o /out/manager ./cmd/manager

FROM scratch
ARG VERSION=unknown
ARG REVISION=unknown
COPY --from=build /out/rootfs/ /
COPY --from=build /out/manager /manager
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
LABEL org.opencontainers.image.source="https://github.com/sluice-dev/sluice" \
      org.opencontainers.image.title="sluice" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
USER 65532:65532
WORKDIR /
ENTRYPOINT ["/manager"]
