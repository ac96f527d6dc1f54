# Multi-stage build: a static outboxd binary on a minimal, non-root image.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/outboxd ./cmd/outboxd

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/outboxd /usr/local/bin/outboxd
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/outboxd"]
CMD ["--help"]
