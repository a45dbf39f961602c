# Container images and the end-to-end tests. Included by the Makefile, which
# defines GO, BIN, VERSION and ENGINE (podman or docker, whichever is installed).
# Every image here is built FROM scratch from binaries built on this machine,
# so nothing is pulled.

IMAGE      ?= localhost/nodeinit:$(VERSION)
IMAGE_E2E  ?= localhost/nodeinit-e2e:$(VERSION)
E2E_TIMEOUT ?= 10m

.PHONY: image image-e2e e2e

image: build ## the nodeinit image: scratch + bin/nodeinit (`docker build .` compiles in a builder stage instead)
	$(if $(ENGINE),,$(error neither podman nor docker is installed))
	$(ENGINE) build --target prebuilt --build-arg VERSION=$(VERSION) -t $(IMAGE) .

image-e2e: build helpers $(BIN)/sh ## the image the end-to-end tests run: nodeinit + the helper programs + a static busybox as /bin/sh, from scratch
	$(if $(ENGINE),,$(error neither podman nor docker is installed))
	$(ENGINE) build -f images/e2e/Dockerfile --build-arg VERSION=$(VERSION) -t $(IMAGE_E2E) .

# The e2e image's shell: Debian's busybox-static.
$(BIN)/sh: /bin/busybox
	mkdir -p $(BIN) && cp $< $@

e2e: ## end-to-end tests in podman and runc (root; they build their own image in a private store)
	$(GO) test -count=1 -timeout $(E2E_TIMEOUT) ./test/e2e

# The multi-platform images (docs/arch.md): podman builds each platform's
# image into a manifest list and writes it out as one OCI image index, an
# oci-archive (push it with `skopeo copy --all oci-archive:FILE
# docker://REGISTRY/NAME:TAG`). The list and its images are then removed from
# podman's store: podman 4.3 cannot read back a list that podman build
# --manifest made (`podman images` fails on "locating item named
# manifest-sha256:..."), and running from the index goes through the archive:
# `podman run --arch arm64 oci-archive:FILE`. The plain image needs no
# emulator (nothing runs at build time); the node image's base for another
# architecture is made by mmdebstrap, whose package configuration runs under
# qemu-user (make binfmt).
IMAGE_PLATFORMS          ?= linux/amd64 linux/arm64
IMAGE_INDEX_ARCHIVE      ?= $(BIN)/nodeinit-index.tar
NODE_IMAGE_INDEX_ARCHIVE ?= $(BIN)/nodeinit-node-index.tar
# The list's name while it is built; its images carry it as a label.
IMAGE_INDEX              ?= localhost/nodeinit-index:$(VERSION)

.PHONY: image-index node-image-index

image-index: ## the plain nodeinit image for each of IMAGE_PLATFORMS (amd64, arm64), as one OCI image index in IMAGE_INDEX_ARCHIVE (podman)
	@command -v podman >/dev/null || { echo "make image-index needs podman"; exit 1; }
	@$(MAKE) --no-print-directory release RELEASE_PLATFORMS="$(IMAGE_PLATFORMS)"
	@rm -rf $(BIN)/image-context && set -e && for p in $(IMAGE_PLATFORMS); do \
	  mkdir -p $(BIN)/image-context/$$p && ln -f $(BIN)/$$(echo $$p | tr / _)/nodeinit $(BIN)/image-context/$$p/nodeinit; done
	@podman manifest rm $(IMAGE_INDEX) >/dev/null 2>&1 || true
	podman build --quiet -f images/nodeinit/Dockerfile --platform $$(echo $(IMAGE_PLATFORMS) | tr " " ,) \
	  --build-arg VERSION=$(VERSION) --label org.nodeinit.index=$(IMAGE_INDEX) --manifest $(IMAGE_INDEX) $(BIN)/image-context >/dev/null
	rm -f $(IMAGE_INDEX_ARCHIVE) && podman manifest push --quiet --all --format oci $(IMAGE_INDEX) oci-archive:$(IMAGE_INDEX_ARCHIVE)
	@podman manifest rm $(IMAGE_INDEX) >/dev/null; podman image prune --force --filter label=org.nodeinit.index=$(IMAGE_INDEX) >/dev/null
	@rm -rf $(BIN)/image-context
	@echo "$(IMAGE_INDEX_ARCHIVE): $$(tar -xOf $(IMAGE_INDEX_ARCHIVE) index.json | sed 's/.*"mediaType":"\([^"]*\)".*/\1/') of $(IMAGE_PLATFORMS), $$(stat -c %s $(IMAGE_INDEX_ARCHIVE)) bytes"

node-image-index: ## the node image (images/node) for each of IMAGE_PLATFORMS on a Debian base from Debian's packages, as one OCI image index in NODE_IMAGE_INDEX_ARCHIVE (root, podman, mmdebstrap, make binfmt; KUBE_BIN_<arch> names a directory with that architecture's kubelet and kube-proxy, else they are built)
	@$(MAKE) --no-print-directory release RELEASE_PLATFORMS="$(IMAGE_PLATFORMS)"
	test/arch/node-image-index.sh $(NODE_IMAGE_INDEX_ARCHIVE) $(VERSION) $(IMAGE_PLATFORMS)
