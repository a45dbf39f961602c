package footprint

// The binary's pages.
//
// The kernel maps an executable's pages as the process first touches
// them, each fault mapping the cached pages around it as well (a window of
// 64 KiB, and on file systems with large folios, ext4's among them, whole
// folios that readahead made large). A Go binary lays out its code and
// read-only data by package, not by use, so nodeinit's start, which runs
// the flags, the configuration, cgroups, mounts, the log and each task's
// start, leaves nearly all of the binary mapped: 6.2 of its 6.6 MB on a
// node, seen in the container bench, where a minute idle touches a few
// hundred KB. Those pages count in its memory and in the node container's
// cgroup for as long as they stay mapped.
//
// ReleaseBinaryPages asks the kernel to reclaim the pages of the binary's
// read-only mappings, its code and read-only data, with
// madvise(MADV_PAGEOUT) (Linux 5.4): a page only this process maps leaves
// its page tables and the page cache, and is read back in when touched
// again, as a new program's pages are; a page another process maps too (a
// second node of the same image) is left alone, and so is every page where
// nodeinit may not write the binary (the kernel's rule for a file's pages).

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// mapping is one line of /proc/PID/maps: [start, end) and what is mapped.
type mapping struct {
	start, end uintptr
	perms      string
	file       string // device and inode: "fd:01 1234"
}

// ReleaseBinaryPages gives back the pages of the process's binary that it
// maps alone, as above. It returns the bytes of the mappings it asked the
// kernel to reclaim, and what failed.
func ReleaseBinaryPages() (int64, error) {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	ranges, err := binaryMappings(maps, reflect.ValueOf(ReleaseBinaryPages).Pointer())
	if err != nil {
		return 0, err
	}
	var n int64
	for _, m := range ranges {
		if _, _, e := unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, unix.MADV_PAGEOUT); e != 0 {
			return n, fmt.Errorf("madvise(%#x-%#x, MADV_PAGEOUT): %w", m.start, m.end, e)
		}
		n += int64(m.end - m.start)
	}
	return n, nil
}

// binaryMappings returns the read-only mappings of the file that holds the
// address code, from the text of /proc/PID/maps. The file is known by its
// device and inode, which the kernel shows for a binary on an overlay as
// for any other, under whichever path.
func binaryMappings(maps []byte, code uintptr) ([]mapping, error) {
	var all []mapping
	var file string
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		m, ok := parseMapping(sc.Text())
		if !ok {
			continue
		}
		all = append(all, m)
		if m.start <= code && code < m.end {
			file = m.file
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if file == "" {
		return nil, fmt.Errorf("no file mapping holds the code at %#x", code)
	}
	var ranges []mapping
	for _, m := range all {
		if m.file == file && !strings.Contains(m.perms, "w") {
			ranges = append(ranges, m)
		}
	}
	return ranges, nil
}

// parseMapping reads "start-end perms offset dev inode [path]"; a mapping
// of no file (inode 0) is not one.
func parseMapping(line string) (mapping, bool) {
	f := strings.Fields(line)
	if len(f) < 5 || f[4] == "0" {
		return mapping{}, false
	}
	lo, hi, ok := strings.Cut(f[0], "-")
	if !ok {
		return mapping{}, false
	}
	start, err1 := strconv.ParseUint(lo, 16, 64)
	end, err2 := strconv.ParseUint(hi, 16, 64)
	if err1 != nil || err2 != nil || end <= start {
		return mapping{}, false
	}
	return mapping{start: uintptr(start), end: uintptr(end), perms: f[1], file: f[3] + " " + f[4]}, true
}
