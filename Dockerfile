# syntax=docker/dockerfile:1
# Multi-stage build: a static outboxd binary (CGO_ENABLED=0) on a minimal
# distroless image that runs as a non-root user and has no shell.
ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
# What `outboxd version` prints. The build context has no .git, so make
# docker passes `git describe`, as make build stamps it; without it, dev.
ARG VERSION=dev
WORKDIR /src
ENV CGO_ENABLED=0
# Dependencies first, so editing the code does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags="-s -w -X github.com/outboxkit/outbox/cmd/outboxd/internal/cli.version=${VERSION}" -o /out/outboxd ./cmd/outboxd

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/outboxd /usr/local/bin/outboxd
# distroless's "nonroot" user, numerically, so runAsNonRoot checks can verify it.
USER 65532:65532
# The admin server of `outboxd run` (health, metrics, dashboard).
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/outboxd"]
CMD ["--help"]
