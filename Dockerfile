# pulumi-controller image.
#
#   docker build -t pulumi-controller .
#   docker build --build-arg PULUMI_VERSION=3.140.0 -t pulumi-controller .
#
# Stage 1 builds the controller on Debian 12 exactly as `make` does on a
# developer machine.  The pulumi CLI and its language hosts come from
# Pulumi's own base image; the controller drives that real CLI.  The runtime
# image is Debian 12 slim with only the shared libraries the binary links,
# running as an unprivileged user with a writable /data for the artifact
# store, workspaces and the shared PULUMI_HOME.

ARG PULUMI_VERSION=3.140.0

FROM debian:12 AS build
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends build-essential pkg-config git \
      libcurl4-openssl-dev libssl-dev libarchive-dev libcjson-dev libyaml-dev libmicrohttpd-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN make clean && make -j"$(nproc)" && make install PREFIX=/usr DESTDIR=/out

FROM pulumi/pulumi-base:${PULUMI_VERSION} AS pulumi

FROM debian:12-slim
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends ca-certificates \
      libcurl4 libssl3 libarchive13 libcjson1 libyaml-0-2 libmicrohttpd12 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 65532 --user-group --home-dir /data --create-home controller
COPY --from=build /out/usr/bin/pulumi-controller /usr/bin/pulumi-controller
COPY --from=pulumi /pulumi/bin/ /usr/local/pulumi/bin/
ENV PATH=/usr/local/pulumi/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
USER 65532:65532
WORKDIR /data
ENTRYPOINT ["/usr/bin/pulumi-controller"]
CMD ["run"]
