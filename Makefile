# parley-keyd build, test and install.
#   make build     binaries into ./bin
#   make test      gofmt, vet, staticcheck, then every test with the race detector;
#                  prints failures, skipped tests and a count
#   make demo      the quickstart: a daemon on ./demo-state, terminal approval
#   make install   binaries, systemd units, sysusers/tmpfiles, man pages, completions (DESTDIR, PREFIX);
#                  needs no Go once make build has run
#   make uninstall removes what install put; keeps the state, the configuration and the user
#   make deb       the Debian package, build/parley-keyd_VERSION_ARCH.deb (nfpm)
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

.PHONY: build test lint unit mcp-ts-modules demo install uninstall docs deb bench fuzz clean

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
	@$(GO) vet ./...
	@$(STATICCHECK) ./...

# Every test with the race detector, through internal/testkit/testsummary: failures
# in full as they come, then one line per skipped test with the peer it
# lacked, and a count; nothing else. The exit status is go test's. (Built,
# not go run, which would turn every status into 1.)
unit: mcp-ts-modules
	@$(GO) build -o bin/testsummary ./internal/testkit/testsummary
	@bin/testsummary -race -count=1 -timeout 30m ./...

# The TypeScript MCP client's modules, for its tests: npm ci when they are
# missing or older than the lock file, from npm's cache first. When npm or
# the registry is out of reach, the run goes on and those tests skip saying
# so (a failure under PARLEY_REQUIRE_PEERS=1).
MCPTS = cmd/parley-grant/testdata/mcp-ts
mcp-ts-modules:
	@if command -v npm >/dev/null 2>&1 && { [ ! -f $(MCPTS)/node_modules/.package-lock.json ] || \
	    [ $(MCPTS)/package-lock.json -nt $(MCPTS)/node_modules/.package-lock.json ]; }; then \
	  (cd $(MCPTS) && npm ci --prefer-offline --no-audit --no-fund --fetch-retries=1 --loglevel=error >/dev/null) || \
	    echo "make: npm ci in $(MCPTS) failed; the TypeScript MCP client tests will skip"; \
	fi

test: lint unit

demo:
	$(GO) run ./cmd/parley-keyd demo

# parley-keyd against ssh-agent in one run; figures in docs/performance.md.
BENCHFLAGS ?=
bench:
	$(GO) run ./internal/testkit/bench $(BENCHFLAGS)

# Every fuzz target of the module (found with go test -list), each for a
# number of executions rather than a time: with a duration, go1.26's fuzzing
# coordinator can report its own deadline as "context deadline exceeded" and
# fail a target that found nothing (golang/go#75804, fixed in go1.27). A count
# has no deadline to race. FUZZEXECS is per target; targets that go through a
# real socket, or copy a whole log folder for each input, run a tenth of it.
# Minimizing is off by default, so a crasher is saved as found; FUZZMINIMIZE=30s turns it on. The corpus stays in each
# package's testdata.
FUZZEXECS    ?= 200000
FUZZ_SLOW    ?= FuzzServeFrame FuzzVerifyAcknowledged
FUZZMINIMIZE ?= 0s
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for fn in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    n=$(FUZZEXECS); case " $(FUZZ_SLOW) " in *" $$fn "*) n=$$(( $(FUZZEXECS) / 10 ));; esac; \
	    echo "== fuzz $$pkg $$fn for $$n executions"; \
	    $(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $${n}x -fuzzminimizetime $(FUZZMINIMIZE) "$$pkg"; \
	  done; \
	done

# Man pages and bash, zsh and fish completions, generated from the commands
# (and, for the file formats in section 5, from cmd/parley-keyd/man).
# Set SOURCE_DATE_EPOCH for reproducible dates in the pages.
docs: build
	rm -rf bin/docs
	bin/parley-grant gendocs --dir bin/docs
	bin/parley-keyd gendocs --dir bin/docs

# install and uninstall need no Go once make build has run (sudo's
# secure_path has none): the binaries are built only when missing, and the
# pages and completions are made by running them.
bin/parley-keyd bin/parley-grant:
	$(GOBUILD) -o bin/ ./cmd/parley-keyd ./cmd/parley-grant
bin/docs: bin/parley-keyd bin/parley-grant
	rm -rf bin/docs.new
	bin/parley-grant gendocs --dir bin/docs.new
	bin/parley-keyd gendocs --dir bin/docs.new
	rm -rf bin/docs && mv bin/docs.new bin/docs

# install writes the list of what it put in place, the folders it made
# included, to MANIFEST; uninstall removes exactly what the list names, so
# it needs neither Go nor the tree the install was made from. MANIFEST= (as
# make deb says) writes none.
MANIFEST    ?= $(PREFIX)/share/parley-keyd/installed-files
INSTALLDIRS  = $(BINDIR) $(UNITDIR) $(USERUNITDIR) $(SYSUSERSDIR) $(TMPFILESDIR) $(MANDIR)/man1 $(MANDIR)/man5 $(MANDIR)/man8 \
               $(BASHCOMPDIR) $(ZSHCOMPDIR) $(FISHCOMPDIR) $(if $(MANIFEST),$(patsubst %/,%,$(dir $(MANIFEST))))

# BIN is the folder of the binaries to install (make deb's are built apart).
BIN ?= bin
install: $(BIN)/parley-keyd $(BIN)/parley-grant bin/docs
	@set -e; new=$$(for d in $(INSTALLDIRS); do while [ "$$d" != / ] && [ ! -d "$(DESTDIR)$$d" ]; do echo "$$d/"; d=$$(dirname "$$d"); done; done | sort -ru); \
	install -d $(addprefix $(DESTDIR),$(INSTALLDIRS)); \
	set -x; \
	install -m 0755 $(BIN)/parley-keyd $(BIN)/parley-grant $(DESTDIR)$(BINDIR)/; \
	sed 's|@BINDIR@|$(BINDIR)|g; s|@CONFDIR@|$(CONFDIR)|g' dist/parley-keyd.service > $(DESTDIR)$(UNITDIR)/parley-keyd.service; \
	install -m 0644 dist/parley-keyd.socket $(DESTDIR)$(UNITDIR)/; \
	sed 's|@BINDIR@|$(BINDIR)|g' dist/parley-grant-approver.service > $(DESTDIR)$(USERUNITDIR)/parley-grant-approver.service; \
	install -m 0644 dist/sysusers.d/parley-keyd.conf $(DESTDIR)$(SYSUSERSDIR)/; \
	install -m 0644 dist/tmpfiles.d/parley-keyd.conf $(DESTDIR)$(TMPFILESDIR)/; \
	for s in 1 5 8; do install -m 0644 bin/docs/man/man$$s/*.$$s $(DESTDIR)$(MANDIR)/man$$s/; done; \
	install -m 0644 bin/docs/completion/bash/parley-grant bin/docs/completion/bash/parley-keyd $(DESTDIR)$(BASHCOMPDIR)/; \
	install -m 0644 bin/docs/completion/zsh/_parley-grant bin/docs/completion/zsh/_parley-keyd $(DESTDIR)$(ZSHCOMPDIR)/; \
	install -m 0644 bin/docs/completion/fish/parley-grant.fish bin/docs/completion/fish/parley-keyd.fish $(DESTDIR)$(FISHCOMPDIR)/; \
	set +x; \
	if [ -n "$(MANIFEST)" ]; then \
	  { for f in $(INSTALLED) $(COMPLETIONS); do echo "$$f"; done; \
	    cd bin/docs/man && for page in man*/*.[158]; do echo "$(MANDIR)/$$page"; done; \
	    echo "$(MANIFEST)"; echo "$$new"; } | grep . > $(DESTDIR)$(MANIFEST); fi
	@if [ -z "$(DESTDIR)" ]; then \
	  if command -v systemd-sysusers >/dev/null 2>&1; then systemd-sysusers $(SYSUSERSDIR)/parley-keyd.conf; \
	  elif ! getent passwd parley-keyd >/dev/null; then \
	    getent group parley-agents >/dev/null || groupadd --system parley-agents; \
	    useradd --system --home-dir /var/lib/parley-keyd --no-create-home --shell /usr/sbin/nologin parley-keyd; fi; \
	  home=$$(getent passwd parley-keyd | cut -d: -f6); \
	  if [ -n "$$home" ] && [ "$$home" != /var/lib/parley-keyd ]; then \
	    echo "warning: the user parley-keyd existed already, with home $$home rather than /var/lib/parley-keyd;" >&2; \
	    echo "hint: check that it is this daemon's user, then: usermod --home /var/lib/parley-keyd parley-keyd" >&2; fi; \
	fi

# What make install puts in place besides the man pages by the names
# gendocs wrote into bin/docs; an install made before the manifest existed
# is uninstalled by these names.
COMPLETIONS = $(BASHCOMPDIR)/parley-grant $(BASHCOMPDIR)/parley-keyd $(ZSHCOMPDIR)/_parley-grant $(ZSHCOMPDIR)/_parley-keyd \
              $(FISHCOMPDIR)/parley-grant.fish $(FISHCOMPDIR)/parley-keyd.fish
INSTALLED   = $(BINDIR)/parley-keyd $(BINDIR)/parley-grant \
              $(UNITDIR)/parley-keyd.service $(UNITDIR)/parley-keyd.socket $(USERUNITDIR)/parley-grant-approver.service \
              $(SYSUSERSDIR)/parley-keyd.conf $(TMPFILESDIR)/parley-keyd.conf

# Removes exactly what install put in place. It keeps what the daemon made
# and what an admin may have edited or still needs, and says so.
uninstall:
	@set -e; m="$(DESTDIR)$(MANIFEST)"; \
	if [ -f "$$m" ]; then \
	  list=$$(cat "$$m"); \
	  echo "$$list" | grep -v '/$$' | while IFS= read -r f; do rm -f "$(DESTDIR)$$f"; done; \
	  echo "$$list" | grep '/$$' | while IFS= read -r d; do rmdir "$(DESTDIR)$$d" 2>/dev/null || true; done; \
	else \
	  echo "$$m is missing (an install older than it): removing the files by their names"; \
	  rm -f $(addprefix $(DESTDIR),$(INSTALLED) $(COMPLETIONS)); \
	  if [ -d bin/docs/man ]; then cd bin/docs/man && for page in man*/*.[158]; do rm -f "$(DESTDIR)$(MANDIR)/$$page"; done; \
	  else echo "warning: bin/docs is missing, so the man pages stay; hint: run make docs, then make uninstall again" >&2; fi; \
	fi
	@echo "make uninstall kept, for you to remove if you mean to:"
	@echo "  /var/lib/parley-keyd  the state folder: the principal key, the audit log, the paired phones"
	@echo "  $(CONFDIR)  the configuration and policy"
	@echo "  the user parley-keyd and the group parley-agents (userdel parley-keyd; groupdel parley-agents)"
	@if [ -z "$(DESTDIR)" ] && command -v systemctl >/dev/null 2>&1; then \
	  echo "Stop the daemon if it still runs: systemctl disable --now parley-keyd.socket parley-keyd.service; systemctl daemon-reload"; fi

# The Debian package, build/parley-keyd_VERSION_ARCH.deb, made by nfpm from
# what make install puts under DESTDIR, in Debian's places (units in
# /lib/systemd/system as bookworm has them, man pages compressed, zsh's
# vendor folder), with the docs and the maintainer scripts of dist/debian.
# Its binaries are built as Debian builds C programs: position-independent,
# with read-only relocations bound at load time, and stripped (the Go
# runtime's own tables still give stack traces). Set DEB_MAINTAINER to
# build a package that names you.
NFPM          ?= $(GO) run github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2
DEBARCH       ?= $(shell dpkg --print-architecture 2>/dev/null || echo amd64)
DEB_MAINTAINER ?= parley-keyd <parley-keyd@localhost>
DEBGOFLAGS     = -buildmode=pie -trimpath -ldflags='-s -w -linkmode=external -extldflags=-Wl,-z,relro,-z,now'
deb: build
	@set -e; version=$$(bin/parley-keyd --version | sed -n '1s/^parley-keyd //p'); \
	root=build/deb-root; rm -rf $$root build/bin build/parley-keyd_*.deb; \
	$(GOBUILD) $(DEBGOFLAGS) -o build/bin/ ./cmd/parley-keyd ./cmd/parley-grant; \
	$(MAKE) --no-print-directory install BIN=build/bin DESTDIR=$(CURDIR)/$$root PREFIX=/usr UNITDIR=/lib/systemd/system \
	  ZSHCOMPDIR=/usr/share/zsh/vendor-completions MANIFEST= >/dev/null 2>&1; \
	gzip -9n $$root/usr/share/man/man*/*; \
	doc=$$root/usr/share/doc/parley-keyd; install -d $$doc/docs; \
	install -m 0644 README.md $$doc/; install -m 0644 docs/*.md $$doc/docs/; install -m 0644 dist/debian/copyright $$doc/; \
	printf 'parley-keyd (%s) unstable; urgency=medium\n\n  * Built from revision %s.\n\n -- %s  %s\n' \
	  "$$version" "$$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)" "$(DEB_MAINTAINER)" \
	  "$$(date -R -u -d @$${SOURCE_DATE_EPOCH:-$$(git log -1 --format=%ct 2>/dev/null || date +%s)})" | gzip -9n > $$doc/changelog.gz; \
	install -d $$root/usr/share/lintian/overrides; install -m 0644 dist/debian/lintian-overrides $$root/usr/share/lintian/overrides/parley-keyd; \
	libc=$$(objdump -T build/bin/parley-keyd build/bin/parley-grant 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1); \
	VERSION=$$version ARCH=$(DEBARCH) LIBC=$${libc:-2.36} MAINTAINER="$(DEB_MAINTAINER)" \
	  $(NFPM) package --config dist/debian/nfpm.yaml --packager deb --target build/; \
	ls build/parley-keyd_$${version}_$(DEBARCH).deb

clean:
	rm -rf bin build
