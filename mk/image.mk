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
