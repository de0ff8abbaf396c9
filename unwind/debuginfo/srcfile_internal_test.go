package debuginfo

import "testing"

// TestMakeSrcFileAbsolutePrimary pins the names of line-table files as
// Go's debug/dwarf hands them over: for the DWARF 5 unit clang writes for
// an assembler file (testdata/kernel/scs-6.12-percpu's entry.S: directory
// 0 the compilation directory, file 0 the absolute source path, also the
// unit's DW_AT_name) debug/dwarf joins the two; the file is the source
// path, as addr2line and llvm-symbolizer print it. The old code gave the
// joined "/build/dir/src/..." path.
func TestMakeSrcFileAbsolutePrimary(t *testing.T) {
	const dir, src = "/work/kcap/pcpu/build/scs-6.12-percpu", "/work/kcap/pcpu/src/linux-source-6.12/arch/arm64/kernel/entry.S"
	for _, c := range []struct {
		name, cu   string
		file, path string
	}{
		{dir + src, src, src, src}, // debug/dwarf's join of file 0
		{dir + "/kernel/sched/core.c", "kernel/sched/core.c", "kernel/sched/core.c", dir + "/kernel/sched/core.c"}, // relative, under the build
		{"include/x.h", src, "include/x.h", dir + "/include/x.h"},                                                  // relative entry
		{dir + src, "/other.S", src[1:], dir + src},                                                                // not the unit's own name: left alone
	} {
		got := makeSrcFile(c.name, dir, c.cu)
		if got.file != c.file || got.path != c.path {
			t.Errorf("makeSrcFile(%q, %q, %q) = %q, %q; want %q, %q", c.name, dir, c.cu, got.file, got.path, c.file, c.path)
		}
	}
}
