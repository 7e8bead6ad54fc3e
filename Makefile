# Installing haul; scripts/install.sh does the work (see its --help).
#
#     make install                    # ~/.local/bin/haul, completions, man page
#     make install PREFIX=/opt/haul   # elsewhere
#     make install DESTDIR=/tmp/stage PREFIX=/usr/local   # staged, for packaging
#     make uninstall
#     make test-install               # installs into a temporary prefix and checks it

PREFIX ?= $(HOME)/.local
DESTDIR ?=

.PHONY: install uninstall test-install

install:
	DESTDIR='$(DESTDIR)' scripts/install.sh --prefix '$(PREFIX)'

uninstall:
	DESTDIR='$(DESTDIR)' scripts/install.sh --prefix '$(PREFIX)' --uninstall

test-install:
	scripts/test-install.sh
