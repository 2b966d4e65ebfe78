# parley-keyd build, test and install.
#   make build     binaries into ./bin
#   make test      every test, with the race detector, plus gofmt, vet and staticcheck
#   make demo      the quickstart: a daemon on ./demo-state, terminal approval
#   make install   binaries, systemd units, sysusers/tmpfiles, man pages, completions (DESTDIR, PREFIX)
#   make bench     parley-keyd against ssh-agent, in one run
#   make fuzz      every fuzz target for FUZZEXECS executions (default 200000)

GO          ?= go
PREFIX      ?= /usr/local
DESTDIR     ?=
BINDIR      ?= $(PREFIX)/bin
UNITDIR     ?= $(PREFIX)/lib/systemd/system
USERUNITDIR ?= $(PREFIX)/lib/systemd/user
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
TMPFILESDIR ?= $(PREFIX)/lib/tmpfiles.d
CONFDIR     ?= /etc/parley-keyd
MANDIR      ?= $(PREFIX)/share/man
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR  ?= $(PREFIX)/share/zsh/site-functions
FISHCOMPDIR ?= $(PREFIX)/share/fish/vendor_completions.d
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: build test lint unit demo install install-docs docs bench fuzz clean

# The binaries carry the VCS revision they were built from (--version):
# the go tool stamps it when git can read this tree. A GOFLAGS of
# -buildvcs=false does not apply to these builds; BUILDVCS=false does. Root
# may not read a clone that another user owns (git's safe.directory), as in
# sudo make install after make build: this tree, and only for this build,
# is declared safe, since running its Makefile as root trusts it anyway.
BUILDVCS ?= $(shell command -v git >/dev/null 2>&1 && echo auto || echo false)
GOBUILD   = GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0="$(CURDIR)" $(GO) build -buildvcs=$(BUILDVCS)

build:
	$(GOBUILD) -o bin/ ./cmd/parley-keyd ./cmd/parley-grant

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...

unit:
	$(GO) test -race -count=1 ./...

test: lint unit

demo:
	$(GO) run ./cmd/parley-keyd demo

# parley-keyd against ssh-agent in one run; figures in docs/performance.md.
BENCHFLAGS ?=
bench:
	$(GO) run ./internal/bench $(BENCHFLAGS)

# Every fuzz target of the module (found with go test -list), each for a
# number of executions rather than a time: with a duration, go1.26's fuzzing
# coordinator can report its own deadline as "context deadline exceeded" and
# fail a target that found nothing (golang/go#75804, fixed in go1.27). A count
# has no deadline to race. FUZZEXECS is per target; targets that go through a
# real socket run a tenth of it. Minimizing is off by default, so a crasher is
# saved as found; FUZZMINIMIZE=30s turns it on. The corpus stays in each
# package's testdata.
FUZZEXECS    ?= 200000
FUZZ_SLOW    ?= FuzzServeFrame
FUZZMINIMIZE ?= 0s
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for fn in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    n=$(FUZZEXECS); case " $(FUZZ_SLOW) " in *" $$fn "*) n=$$(( $(FUZZEXECS) / 10 ));; esac; \
	    echo "== fuzz $$pkg $$fn for $$n executions"; \
	    $(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $${n}x -fuzzminimizetime $(FUZZMINIMIZE) "$$pkg"; \
	  done; \
	done

# Man pages and bash, zsh and fish completions, generated from the commands.
# Set SOURCE_DATE_EPOCH for reproducible dates in the pages.
docs: build
	rm -rf bin/docs
	bin/parley-grant gendocs --dir bin/docs
	bin/parley-keyd gendocs --dir bin/docs

install-docs: docs
	install -d $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) $(DESTDIR)$(FISHCOMPDIR)
	install -m 0644 bin/docs/man/man1/*.1 $(DESTDIR)$(MANDIR)/man1/
	install -m 0644 bin/docs/man/man8/*.8 $(DESTDIR)$(MANDIR)/man8/
	install -m 0644 bin/docs/completion/bash/parley-grant bin/docs/completion/bash/parley-keyd $(DESTDIR)$(BASHCOMPDIR)/
	install -m 0644 bin/docs/completion/zsh/_parley-grant bin/docs/completion/zsh/_parley-keyd $(DESTDIR)$(ZSHCOMPDIR)/
	install -m 0644 bin/docs/completion/fish/parley-grant.fish bin/docs/completion/fish/parley-keyd.fish $(DESTDIR)$(FISHCOMPDIR)/

install: build install-docs
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(USERUNITDIR) $(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(TMPFILESDIR)
	install -m 0755 bin/parley-keyd bin/parley-grant $(DESTDIR)$(BINDIR)/
	sed 's|@BINDIR@|$(BINDIR)|g; s|@CONFDIR@|$(CONFDIR)|g' dist/parley-keyd.service > $(DESTDIR)$(UNITDIR)/parley-keyd.service
	install -m 0644 dist/parley-keyd.socket $(DESTDIR)$(UNITDIR)/
	sed 's|@BINDIR@|$(BINDIR)|g' dist/parley-grant-approver.service > $(DESTDIR)$(USERUNITDIR)/parley-grant-approver.service
	install -m 0644 dist/sysusers.d/parley-keyd.conf $(DESTDIR)$(SYSUSERSDIR)/
	install -m 0644 dist/tmpfiles.d/parley-keyd.conf $(DESTDIR)$(TMPFILESDIR)/
	@if [ -z "$(DESTDIR)" ]; then \
	  if command -v systemd-sysusers >/dev/null 2>&1; then systemd-sysusers $(SYSUSERSDIR)/parley-keyd.conf; \
	  elif ! getent passwd parley-keyd >/dev/null; then \
	    getent group parley-agents >/dev/null || groupadd --system parley-agents; \
	    useradd --system --home-dir /var/lib/parley-keyd --no-create-home --shell /usr/sbin/nologin parley-keyd; fi; \
	fi

clean:
	rm -rf bin
