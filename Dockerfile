# syntax=docker/dockerfile:1
# companion's image: a static binary on an empty base, run as a non-root user, its ledger in /data.
#
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) -t companion .
#
# The builder needs nothing but the Go toolchain and a shell (GO_IMAGE: the official Go image by
# default; deploy/image-test.sh builds with one made from the machine's own Go). The final image has
# no shell and no package manager: the program carries its CA roots and time zones, and its
# HEALTHCHECK is the program itself (companion healthcheck asks /readyz).
ARG GO_IMAGE=golang:1.26-bookworm

FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY . .
# GOPROXY passes through when given (a module mirror; empty: Go's default).
ARG GOPROXY
# The version companion --version, GET /healthz and the start line report: the tag or commit.
ARG VERSION=dev
# -tags nomsgpack leaves out gin's MessagePack binding, which companion never uses (6.5 MB of the binary).
# WORKDIR makes the ledger's directory (the builder has no mkdir); the build runs in /src.
WORKDIR /out/data
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    cd /src && CGO_ENABLED=0 go build -trimpath -tags nomsgpack \
      -ldflags "-s -w -X github.com/replaysafe/companion/cmd/companion/cli.Version=${VERSION}" \
      -o /out/companion ./cmd/companion

FROM scratch
COPY --from=build /out/companion /companion
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
ENV COMPANION_ADDR=0.0.0.0:8080 \
    COMPANION_DATA_DIR=/data
VOLUME /data
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 CMD ["/companion", "healthcheck"]
ENTRYPOINT ["/companion"]
CMD ["serve"]
