# The pulumi-controller image (docs/install.md, "The image"; docs/security.md).
#
#   docker build \
#     --build-arg PULUMI_SHA256_AMD64=<sha256 of pulumi-v3.274.1-linux-x64.tar.gz> \
#     --build-arg VERSION="$(git describe --tags --always)" -t pulumi-controller .
#
# Three stages, all Debian 12 (bookworm), the distribution the project builds and
# tests on:
#   build   the -dev packages of scripts/deps.sh and `make`, then `make install`
#           into /out: the image holds exactly the files `make install` installs.
#   pulumi  the pinned pulumi CLI release (the version tests/real/versions.env
#           tests against), downloaded and checked against its sha256 before it
#           is unpacked.  The checksum is not in this file: take the line for
#           pulumi-v<version>-linux-x64.tar.gz (or -linux-arm64) from the release's
#           pulumi-<version>-checksums.txt and pass it as PULUMI_SHA256_AMD64 (or
#           _ARM64).  Without it, or with a wrong one, the build fails: nothing
#           unverified gets into the image.
#   runtime debian:12-slim with the shared libraries the binary links, CA
#           certificates, Node.js (with npm) and Python 3 (with venv and pip) for
#           Pulumi programs, the CLI from the pulumi stage, and a numeric
#           non-root user.  The store and PULUMI_HOME are volumes.

ARG PULUMI_VERSION=3.274.1

FROM debian:12 AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG VERSION=dev
# Versions are those of the Debian 12 point release the base tag names.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential pkg-config \
      libcurl4-openssl-dev libssl-dev libarchive-dev libcjson-dev libyaml-dev libmicrohttpd-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN make clean \
 && make -j"$(nproc)" VERSION="${VERSION}" all \
 && make VERSION="${VERSION}" install PREFIX=/usr/local DESTDIR=/out

FROM debian:12-slim AS pulumi
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG PULUMI_VERSION
ARG PULUMI_SHA256_AMD64=""
ARG PULUMI_SHA256_ARM64=""
ARG TARGETARCH=amd64
# Only the download tools, unpinned like the rest: the tarball itself is pinned by sha256.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/*
RUN case "${TARGETARCH}" in \
      amd64) arch=x64; var=PULUMI_SHA256_AMD64; sum="${PULUMI_SHA256_AMD64}" ;; \
      arm64) arch=arm64; var=PULUMI_SHA256_ARM64; sum="${PULUMI_SHA256_ARM64}" ;; \
      *) echo "no pulumi CLI release for ${TARGETARCH}" >&2; exit 1 ;; \
    esac \
 && if ! printf '%s\n' "${sum}" | grep -Eqx '[0-9a-f]{64}'; then \
      echo "${var} must be the sha256 of pulumi-v${PULUMI_VERSION}-linux-${arch}.tar.gz (pulumi-${PULUMI_VERSION}-checksums.txt)" >&2; \
      exit 1; \
    fi \
 && curl --fail --silent --show-error --location --proto '=https' --proto-redir '=https' --tlsv1.2 \
      --output /tmp/pulumi.tar.gz \
      "https://github.com/pulumi/pulumi/releases/download/v${PULUMI_VERSION}/pulumi-v${PULUMI_VERSION}-linux-${arch}.tar.gz" \
 && echo "${sum}  /tmp/pulumi.tar.gz" | sha256sum --check --strict - \
 && mkdir -p /opt \
 && tar -xzf /tmp/pulumi.tar.gz -C /opt --no-same-owner --no-same-permissions \
 && rm /tmp/pulumi.tar.gz \
 && PULUMI_SKIP_UPDATE_CHECK=true /opt/pulumi/pulumi version

FROM debian:12-slim
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# The Debian 12 point release of the base tag fixes the versions (security updates
# included); pinning each would only stop those.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      ca-certificates \
      libcurl4 libssl3 libarchive13 libcjson1 libyaml-0-2 libmicrohttpd12 \
      nodejs npm \
      python3 python3-venv python3-pip \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 controller \
 && useradd --uid 65532 --gid 65532 --home-dir /home/controller --create-home \
      --shell /usr/sbin/nologin controller \
 && install -d -o 65532 -g 65532 -m 0750 /var/lib/pulumi-controller /var/lib/pulumi-home
COPY --from=build /out/ /
COPY --from=pulumi /opt/pulumi/ /usr/local/lib/pulumi/
ENV PATH=/usr/local/lib/pulumi:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PULUMI_SKIP_UPDATE_CHECK=true \
    HOME=/home/controller
USER 65532:65532
WORKDIR /home/controller
VOLUME ["/var/lib/pulumi-controller", "/var/lib/pulumi-home"]
EXPOSE 8080 9440
ENTRYPOINT ["/usr/local/bin/pulumi-controller"]
CMD ["run", "--storage-path=/var/lib/pulumi-controller", "--pulumi-home=/var/lib/pulumi-home"]
