package mountns

import (
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// FuzzParseMountinfo parses arbitrary text as mountinfo: it never panics,
// gives one mount per non-blank line when it succeeds, and every mount it
// gives comes back unchanged when written as a mountinfo line the way the
// kernel writes one (paths octal-escaped) and parsed again.
func FuzzParseMountinfo(f *testing.F) {
	slave, err := os.ReadFile("testdata/mountinfo-slave.txt")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(slave))
	f.Add("36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n")
	f.Add("77 22 0:50 /dir\\040with\\040space /mnt/a\\040b\\011c rw - tmpfs none\\134x rw,size=1024k")
	f.Add("1 2 3:4 \\777 \\0 rw - - - -\r\n\n  \n")
	f.Add("1 2 3:4 / / rw shared:1 unbindable propagate_from:2 - cgroup2 cgroup2 rw,nsdelegate extra\n")
	f.Fuzz(func(t *testing.T, text string) {
		mounts, err := ParseMountinfo(strings.NewReader(text))
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error of more than one line: %q", err)
			}
			return
		}
		lines := 0
		for line := range strings.Lines(text) {
			if strings.TrimSpace(line) != "" {
				lines++
			}
		}
		if len(mounts) != lines {
			t.Errorf("%d mounts from %d non-blank lines", len(mounts), lines)
		}
		for _, m := range mounts {
			line := formatMountinfo(m)
			again, err := ParseMountinfo(strings.NewReader(line))
			if err != nil {
				t.Errorf("mount %+v written as %q does not parse: %v", m, line, err)
				continue
			}
			if len(again) != 1 || !reflect.DeepEqual(again[0], m) {
				t.Errorf("mount %+v written as %q parses as %+v", m, line, again)
			}
		}
	})
}

// formatMountinfo writes m as the kernel writes a mountinfo line.
func formatMountinfo(m Mount) string {
	fields := []string{strconv.Itoa(m.ID), strconv.Itoa(m.ParentID),
		strconv.Itoa(m.Major) + ":" + strconv.Itoa(m.Minor), escape(m.Root), escape(m.Mountpoint), m.Options}
	fields = append(fields, m.Optional...)
	fields = append(fields, "-", m.FSType, escape(m.Source), m.SuperOptions)
	return strings.Join(fields, " ") + "\n"
}

// escape is the kernel's mangling of a path in mountinfo (seq_path with
// " \t\n\\"): each of those bytes as a backslash and three octal digits.
func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case ' ', '\t', '\n', '\\':
			b.WriteString(`\` + strconv.FormatUint(uint64(c)|0o1000, 8)[1:])
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
