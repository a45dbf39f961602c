package mountns

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Mount is one line of /proc/<pid>/mountinfo (proc(5)).
type Mount struct {
	ID, ParentID int
	Major, Minor int
	// Root is the path inside the filesystem that is mounted at Mountpoint
	// (for a cgroup filesystem: the cgroup shown at the mount point).
	Root       string
	Mountpoint string
	Options    string
	// Optional holds the optional fields, such as "shared:3" or "master:1".
	Optional     []string
	FSType       string
	Source       string
	SuperOptions string
}

// Shared returns the peer group of a shared mount.
func (m Mount) Shared() (group int, ok bool) { return m.tagged("shared:") }

// Master returns the peer group a slave mount receives propagation from.
func (m Mount) Master() (group int, ok bool) { return m.tagged("master:") }

func (m Mount) tagged(tag string) (int, bool) {
	for _, f := range m.Optional {
		if v, ok := strings.CutPrefix(f, tag); ok {
			n, err := strconv.Atoi(v)
			return n, err == nil
		}
	}
	return 0, false
}

// HasSuperOption reports whether the filesystem was mounted with option opt
// (such as a cgroup v1 controller name).
func (m Mount) HasSuperOption(opt string) bool {
	for o := range strings.SplitSeq(m.SuperOptions, ",") {
		if o == opt {
			return true
		}
	}
	return false
}

// ReadMountinfo parses a mountinfo file such as /proc/self/mountinfo.
func ReadMountinfo(path string) ([]Mount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mounts, err := ParseMountinfo(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return mounts, nil
}

// ParseMountinfo parses the text of a mountinfo file.
func ParseMountinfo(r io.Reader) ([]Mount, error) {
	var mounts []Mount
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	s.Split(scanLF)
	for line := 1; s.Scan(); line++ {
		if strings.TrimSpace(s.Text()) == "" {
			continue
		}
		m, err := parseMountinfoLine(s.Text())
		if err != nil {
			return nil, fmt.Errorf("mountinfo line %d: %w", line, err)
		}
		mounts = append(mounts, m)
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	return mounts, nil
}

// scanLF splits at "\n" alone: the kernel ends mountinfo lines so, and a
// "\r" before it belongs to the last field (bufio.ScanLines would drop it).
func scanLF(data []byte, atEOF bool) (advance int, token []byte, err error) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return i + 1, data[:i], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// parseMountinfoLine parses
// "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue".
func parseMountinfoLine(text string) (Mount, error) {
	fields := strings.Split(text, " ")
	sep := -1
	for i := 6; i < len(fields); i++ {
		if fields[i] == "-" {
			sep = i
			break
		}
	}
	if len(fields) < 7 || sep < 0 || len(fields) < sep+4 {
		return Mount{}, fmt.Errorf("malformed line %q", text)
	}
	var m Mount
	var err error
	if m.ID, err = strconv.Atoi(fields[0]); err != nil {
		return Mount{}, fmt.Errorf("mount id %q is not a number", fields[0])
	}
	if m.ParentID, err = strconv.Atoi(fields[1]); err != nil {
		return Mount{}, fmt.Errorf("parent id %q is not a number", fields[1])
	}
	major, minor, ok := strings.Cut(fields[2], ":")
	if m.Major, err = strconv.Atoi(major); !ok || err != nil {
		return Mount{}, fmt.Errorf("device %q is not major:minor", fields[2])
	}
	if m.Minor, err = strconv.Atoi(minor); err != nil {
		return Mount{}, fmt.Errorf("device %q is not major:minor", fields[2])
	}
	m.Root = unescape(fields[3])
	m.Mountpoint = unescape(fields[4])
	m.Options = fields[5]
	if sep > 6 {
		m.Optional = fields[6:sep]
	}
	m.FSType = fields[sep+1]
	m.Source = unescape(fields[sep+2])
	m.SuperOptions = fields[sep+3]
	return m, nil
}

// unescape undoes the kernel's octal escapes (\040 for a space, \011, \012,
// \134) in mountinfo paths.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
