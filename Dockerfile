# nodeinit: a static PID 1 for Kubernetes node containers.
#
# Two ways to build the same image (see images/node/README.md for the node image):
#
#   docker build -t nodeinit .                  # compile in a Go builder stage (pulls golang)
#   make build && podman build --target prebuilt -t nodeinit .
#                                               # package the bin/nodeinit that `make build` made;
#                                               # pulls nothing, so it works where only scratch is available
#
# Both final stages are scratch with one file, /nodeinit, as the ENTRYPOINT.

ARG GO_VERSION=1.26

FROM docker.io/library/golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/nodeinit ./cmd/nodeinit

# prebuilt packages an already built, static bin/nodeinit. Build stages that a
# target does not need are skipped (BuildKit, and buildah/podman 4), so this
# target never pulls the golang image.
FROM scratch AS prebuilt
ARG VERSION=dev
LABEL org.opencontainers.image.title="nodeinit" \
      org.opencontainers.image.description="PID 1 for Kubernetes node containers: reaps, forwards signals, supervises the kubelet and kube-proxy" \
      org.opencontainers.image.source="https://github.com/nodeinit/nodeinit" \
      org.opencontainers.image.version="${VERSION}"
COPY bin/nodeinit /nodeinit
STOPSIGNAL SIGTERM
ENTRYPOINT ["/nodeinit"]

# The default target (last stage): the binary compiled above.
FROM scratch
ARG VERSION=dev
LABEL org.opencontainers.image.title="nodeinit" \
      org.opencontainers.image.description="PID 1 for Kubernetes node containers: reaps, forwards signals, supervises the kubelet and kube-proxy" \
      org.opencontainers.image.source="https://github.com/nodeinit/nodeinit" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/nodeinit /nodeinit
STOPSIGNAL SIGTERM
ENTRYPOINT ["/nodeinit"]
