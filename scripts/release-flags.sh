# scripts/release-flags.sh: the flags of a release build of haul on Linux, sourced (bash) by
# scripts/install.sh and Benchmarks/lib.sh, so that what the benchmarks measure is what
# users install. Sets the array HAUL_RELEASE_FLAGS (without --scratch-path) from the
# checkout's root in $1.
#
# - The Swift runtime and Foundation linked statically (--static-swift-stdlib): the binary
#   needs no toolchain, and starts about 10 ms sooner than one loading its shared libraries.
# - Generic types' metadata reached through their accessors rather than by mangled name, in
#   every module, the dependencies too, as Package.swift has the haul target do
#   (haulStartupSettings): each mangled name's conformances were looked up at run time, each
#   lookup walking every conformance record, about a tenth of a short run's CPU.
# - The code a run starts with, together: every function in a section of its own
#   (-function-sections, for C too) and linked by lld in the order of scripts/haul.order,
#   the functions that one-file downloads, lists, split and HTTPS downloads run
#   (scripts/update-order-file.sh writes it from those runs). The kernel maps a binary's
#   pages 64 KiB around each one a run touches, and a one-file run executes about 3 MB of
#   code scattered over 36 MB: it held 22 MB of code pages, ordered about 10 MB (the Swift
#   runtime's and Foundation's static libraries are not built with a section per
#   function, so each comes whole). Peak memory 38 to 29 MiB, wall 0.92x. A function
#   missing from the list (new since it was written) still links, after those listed; the
#   list needs writing again when peak memory creeps up.
# - Relative relocations packed (DT_RELR, -z pack-relative-relocs) where the C library
#   reads them (glibc 2.36 and later): 164,000 relocations in 30 KB instead of 3.9 MB read
#   at every start.
# Without lld (a toolchain that lacks it) the build links as before, unordered. A build
# directory made before a codegen flag changed may keep some old objects: the compiler
# reuses an object whose module's code is unchanged (.swift_modhash), so remove it to get
# every function in its own section.
haul_release_flags() {
    local root=$1 swift_bin lld glibc
    HAUL_RELEASE_FLAGS=(-c release --static-swift-stdlib
        -Xswiftc -Xfrontend -Xswiftc -disable-concrete-type-metadata-mangled-name-accessors
        -Xswiftc -Xfrontend -Xswiftc -function-sections -Xcc -ffunction-sections)
    [[ $(uname -s) == Linux ]] || return 0
    swift_bin=$(command -v "${SWIFT:-swift}" 2>/dev/null) || return 0
    lld=$(dirname "$(readlink -f "$swift_bin")")/ld.lld
    [[ -x $lld ]] || lld=$(command -v ld.lld 2>/dev/null) || return 0
    HAUL_RELEASE_FLAGS+=(-Xswiftc -use-ld=lld
        -Xlinker "--symbol-ordering-file=$root/scripts/haul.order" -Xlinker --no-warn-symbol-ordering)
    glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null) || glibc=
    glibc=${glibc#glibc }
    if [[ $glibc =~ ^([0-9]+)\.([0-9]+) ]] &&
        ((BASH_REMATCH[1] > 2 || (BASH_REMATCH[1] == 2 && BASH_REMATCH[2] >= 36))); then
        HAUL_RELEASE_FLAGS+=(-Xlinker -z -Xlinker pack-relative-relocs)
    fi
}
