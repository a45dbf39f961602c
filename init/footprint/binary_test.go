package footprint

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/test/testenv"
)

func TestBinaryMappingsAreTheReadOnlyOnesOfTheCodesFile(t *testing.T) {
	maps := []byte(`00400000-0070f000 r-xp 00000000 08:01 1234 /usr/local/bin/nodeinit
0070f000-00a36000 r--p 0030f000 08:01 1234 /usr/local/bin/nodeinit
00a36000-00a5c000 rw-p 00636000 08:01 1234 /usr/local/bin/nodeinit
00a5c000-00a90000 rw-p 00000000 00:00 0
c000000000-c000400000 rw-p 00000000 00:00 0
7f0000000000-7f0000001000 r--p 00000000 08:01 99 /etc/ld.so.cache
7f0000002000-7f0000003000 r--p 00000000 00:2f 1234 /other/device/same/inode
7ffd6c5f2000-7ffd6c5f4000 r-xp 00000000 00:00 0 [vdso]
`)
	got, err := binaryMappings(maps, 0x401234)
	if err != nil {
		t.Fatal(err)
	}
	want := []mapping{
		{start: 0x400000, end: 0x70f000, perms: "r-xp", file: "08:01 1234"},
		{start: 0x70f000, end: 0xa36000, perms: "r--p", file: "08:01 1234"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("binaryMappings = %+v; want the code and read-only data: %+v", got, want)
	}
	if _, err := binaryMappings(maps, 0xc000000100); err == nil {
		t.Error("binaryMappings of an address in an anonymous mapping returned no error")
	}
}

// rssOf sums the resident kilobytes of /proc/self/smaps over ranges.
func rssOf(t *testing.T, ranges []mapping) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	total, in := 0, false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if m, ok := parseMapping(line); ok || strings.Contains(strings.Fields(line)[0], "-") {
			in = false
			for _, r := range ranges {
				if ok && m.start == r.start && m.end == r.end {
					in = true
				}
			}
			continue
		}
		if v, ok := strings.CutPrefix(line, "Rss:"); ok && in {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatal(err)
			}
			total += kb
		}
	}
	return total
}

// The test binary gives back its own pages: what it has resident of its
// code and read-only data drops to what it touches again right after.
func TestReleaseBinaryPagesGivesBackWhatOnlyThisProcessMaps(t *testing.T) {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	ranges, err := binaryMappings(maps, reflect.ValueOf(ReleaseBinaryPages).Pointer())
	if err != nil {
		t.Fatal(err)
	}
	before := rssOf(t, ranges)
	n, err := ReleaseBinaryPages()
	testenv.Require(t, !errors.Is(err, unix.EINVAL), "MADV_PAGEOUT (Linux 5.4 and later)")
	if err != nil {
		t.Fatalf("ReleaseBinaryPages: %v", err)
	}
	after := rssOf(t, ranges)
	var size int64
	for _, r := range ranges {
		size += int64(r.end - r.start)
	}
	if n != size {
		t.Errorf("ReleaseBinaryPages covered %d bytes; want the %d of the code and read-only data", n, size)
	}
	t.Logf("the test binary's code and read-only data: %d KiB resident before, %d KiB after (%d KiB mapped)", before, after, size>>10)
	if after > before/2 {
		t.Errorf("%d KiB resident after ReleaseBinaryPages, of %d before; want at most half", after, before)
	}
}
