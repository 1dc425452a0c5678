# gpu-quota — build, test, demo, install.
#   make demo     set up and run the demo (a real runc container with a slice)
#   make test     everything CI runs (installs test dependencies when root)
#   make fuzz     every cargo-fuzz target for FUZZ_SECS (600) seconds each (nightly, cargo-fuzz; docs/fuzzing.md)
#   make install PREFIX=/usr/local
PREFIX ?= /usr/local
CARGO ?= cargo
# cargo's progress: quiet by default; `make build CARGO_Q=` shows it (scripts/demo.sh does)
CARGO_Q ?= --quiet
REL := target/release
DBG := target/debug
SO := interceptor/target/release/libgpuquota.so

.PHONY: all build build-debug build-demo interceptor device-plugin dra test fuzz demo install uninstall bench gpu-carry clean

all: build

interceptor:
	$(CARGO) build --release $(CARGO_Q) --manifest-path interceptor/Cargo.toml

# gpu-quota-runtime and gpu-quota-hook are linked statically: they run once
# each per container start, and a static binary starts without the dynamic
# loader's work (docs/benchmarks.md, "Static binaries and the hook's record
# hint"). Against musl (with dlmalloc as the allocator), which also skips
# glibc's CPU cache probing, when rustup has the host's musl target
# (`rustup target add $(MUSL_TARGET)`; scripts/test.sh adds it); else against
# glibc (+crt-static). They load no library: the driver's libraries are
# loaded only by gpu-quota-driver, their helper child, linked dynamically.
# The static build has its own target directory, so its flags reach nothing else.
HOST_TARGET := $(shell rustc -vV 2>/dev/null | sed -n 's/^host: //p')
MUSL_TARGET := $(subst -gnu,-musl,$(HOST_TARGET))

build: interceptor
	$(CARGO) build --release $(CARGO_Q) -p gpu-quota-install -p gpu-quota-hook --bin gpu-quota --bin gpu-quota-driver
	@if [ "$(MUSL_TARGET)" != "$(HOST_TARGET)" ] && rustup target list --installed 2>/dev/null | grep -qx '$(MUSL_TARGET)'; then \
	  t=$(MUSL_TARGET); flags=; \
	else \
	  echo "note: no rust target $(MUSL_TARGET) (rustup target add $(MUSL_TARGET)): gpu-quota-runtime and gpu-quota-hook are linked statically against glibc" >&2; \
	  t=$(HOST_TARGET); flags="-C target-feature=+crt-static"; \
	fi; \
	RUSTFLAGS="$$RUSTFLAGS $$flags" $(CARGO) build --release $(CARGO_Q) --target $$t -p gpu-quota-shim -p gpu-quota-hook --bin gpu-quota-runtime --bin gpu-quota-hook && \
	install -m 0755 target/$$t/release/gpu-quota-runtime target/$$t/release/gpu-quota-hook $(REL)/
	install -m 0644 $(SO) $(REL)/libgpuquota.so

# What `make demo` runs and nothing else, in one cargo invocation for the host
# target: the `demo` profile (Cargo.toml) skips LTO and the static pair's second
# target, which would compile every shared dependency twice. The demo measures
# nothing, so its binaries need no release tuning.
DEMO := target/demo
build-demo: interceptor
	$(CARGO) build --profile demo $(CARGO_Q) -p gpu-quota-shim -p gpu-quota-hook -p gpu-quota-install \
	  --bin gpu-quota-runtime --bin gpu-quota-hook --bin gpu-quota-driver --bin gpu-quota
	install -m 0644 $(SO) $(DEMO)/libgpuquota.so

# The Kubernetes device plugin (its image: deploy/kubernetes/Dockerfile; docs/kubernetes.md).
device-plugin:
	$(CARGO) build --release $(CARGO_Q) -p gpu-quota-device-plugin

# The Kubernetes DRA driver vram.gpu-quota.io (docs/kubernetes.md, "The DRA driver").
dra:
	$(CARGO) build --release $(CARGO_Q) -p gpu-quota-dra

build-debug: interceptor
	$(CARGO) build $(CARGO_Q) --workspace --bins
	install -m 0644 $(SO) $(DBG)/libgpuquota.so
	$(MAKE) -s -C tests/fake

test:
	bash scripts/test.sh

FUZZ_SECS ?= 600
fuzz:
	FUZZ_SECS=$(FUZZ_SECS) bash scripts/fuzz.sh

demo:
	bash scripts/demo.sh

bench: build
	bash benches/container_start.sh

# What the H200 run needs, copied into .gpu-carry/ (ignored by git).
gpu-carry: build
	bash tests/gpu/prepare-carry.sh

install: build
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/gpu-quota
	install -m 0755 $(REL)/gpu-quota-runtime $(REL)/gpu-quota-hook $(REL)/gpu-quota $(DESTDIR)$(PREFIX)/bin/
	install -m 0755 $(REL)/gpu-quota-driver $(DESTDIR)$(PREFIX)/lib/gpu-quota/
	install -m 0644 $(SO) $(DESTDIR)$(PREFIX)/lib/gpu-quota/libgpuquota.so

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/gpu-quota-runtime $(DESTDIR)$(PREFIX)/bin/gpu-quota-hook $(DESTDIR)$(PREFIX)/bin/gpu-quota
	rm -rf $(DESTDIR)$(PREFIX)/lib/gpu-quota

clean:
	$(CARGO) clean
	$(CARGO) clean --manifest-path interceptor/Cargo.toml
	$(MAKE) -C tests/fake clean
