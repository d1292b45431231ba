# sqsonce container image: a static binary on a minimal, non-root base.
#
#   docker build -t sqsonce .
#   docker run --rm --stop-timeout 40 -v sqsonce-ledger:/var/lib/sqsonce \
#     -e SQSONCE_QUEUE_URL=https://sqs.us-east-1.amazonaws.com/123456789012/orders \
#     -e SQSONCE_HANDLER_TYPE=http -e SQSONCE_HANDLER_URL=http://orders.internal/events \
#     sqsonce
#
# Configuration comes from SQSONCE_* variables alone (see `sqsonce run
# --help`); AWS credentials from the usual AWS variables or the task's role.
# An exec handler needs its program in the image: build FROM this image (or
# pass --build-arg BASE=debian:bookworm-slim for a base with a shell).

ARG BASE=gcr.io/distroless/static-debian12:nonroot

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/sqsonce ./cmd/sqsonce \
 && mkdir -p /out/ledger

FROM ${BASE}
COPY --from=build /out/sqsonce /usr/local/bin/sqsonce
# The ledger: keep it on a volume that outlives the container.
COPY --from=build --chown=65532:65532 /out/ledger /var/lib/sqsonce
VOLUME ["/var/lib/sqsonce"]
USER 65532:65532
# The admin listeners: the worker's (run) and the receiver's (ingest).
ENV SQSONCE_LEDGER_PATH=/var/lib/sqsonce/ledger.db \
    SQSONCE_ADMIN_LISTEN=:9464 \
    SQSONCE_INGEST_ADMIN_LISTEN=:9466
EXPOSE 9464 9466
# SIGTERM drains: running work finishes within SQSONCE_SHUTDOWN_GRACE (25s),
# then what never started is given back. The supervisor must wait longer
# than that before SIGKILL, and an image cannot say so: Docker waits 10s
# unless told (docker run --stop-timeout 40, as above; Compose:
# stop_grace_period: 40s), ECS 30s (the container's stopTimeout, up to
# 120s), Kubernetes 30s (terminationGracePeriodSeconds; the manifests in
# deploy/kubernetes/ set 40). Keep it 15s above the grace.
STOPSIGNAL SIGTERM
# The worker's health; a container that runs `ingest` asks the receiver's:
# docker run --health-cmd '/usr/local/bin/sqsonce health --ingest' ... ingest
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s \
  CMD ["/usr/local/bin/sqsonce", "health"]
ENTRYPOINT ["/usr/local/bin/sqsonce"]
CMD ["run"]
