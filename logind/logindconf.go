package logind

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeinit/nodeinit/internal/linux"
)

// logind's configuration, as far as nodeinit serves it: InhibitDelayMaxSec,
// read the way systemd-logind reads logind.conf(5) when it reloads. The
// kubelet raises the delay by writing a drop-in and asking systemd to send
// logind SIGHUP; a logind that did not reload would leave it refusing the
// feature.

// confDirs are where systemd looks for a configuration file and its
// drop-ins, highest precedence first (systemd.syntax(7), "Configuration
// Directories and Precedence").
var confDirs = []string{"etc/systemd", "run/systemd", "usr/local/lib/systemd", "usr/lib/systemd"}

// Bounds on reading the configuration: a drop-in directory full of files, or
// a huge file, must not cost PID 1 more than this per reload.
const (
	maxConfFile    = 64 << 10
	maxDropIns     = 64
	maxConfProblem = 8 // problems kept per reload, for one log line
)

// logindConf is what a reload found.
type logindConf struct {
	delay    time.Duration // InhibitDelayMaxSec, when set
	set      bool
	from     string   // the file the value came from, relative to the root
	files    []string // every file read, in order
	problems []string // lines ignored, as logind ignores them (bounded)
}

// readLogindConf reads InhibitDelayMaxSec from logind.conf and its drop-ins
// under root, as logind does: the first logind.conf found in confDirs,
// then every logind.conf.d/*.conf of those directories, sorted by file
// name wherever they are, a name in a directory earlier in confDirs hiding
// the same name in a later one, and a drop-in that is a symbolic link to
// /dev/null or empty masking it. A later assignment wins; a value logind
// could not parse is ignored, as logind ignores it.
func readLogindConf(root string) logindConf {
	var conf logindConf
	var files []string
	for _, dir := range confDirs {
		p := filepath.Join(dir, "logind.conf")
		if linux.IsRegular(filepath.Join(root, p)) {
			files = append(files, p)
			break
		}
	}
	dropIns := map[string]string{} // file name -> path, first directory wins
	for _, dir := range confDirs {
		d := filepath.Join(dir, "logind.conf.d")
		entries, err := os.ReadDir(filepath.Join(root, d))
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				conf.problem("%s: %v", d, err)
			}
			continue
		}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".conf") || e.IsDir() {
				continue
			}
			if _, hidden := dropIns[e.Name()]; hidden {
				continue
			}
			if len(dropIns) == maxDropIns {
				conf.problem("%s: more than %d drop-ins, the rest ignored", d, maxDropIns)
				break
			}
			dropIns[e.Name()] = filepath.Join(d, e.Name())
		}
	}
	for _, name := range slices.Sorted(maps.Keys(dropIns)) {
		p := dropIns[name]
		if target, err := os.Readlink(filepath.Join(root, p)); err == nil && target == os.DevNull {
			continue // masked
		}
		files = append(files, p)
	}
	for _, p := range files {
		data, err := readConfFile(filepath.Join(root, p))
		if errors.Is(err, linux.ErrNotRegular) && isDevNull(filepath.Join(root, p)) {
			continue // masked by /dev/null itself, as systemd masks with it
		}
		if err != nil {
			conf.problem("%s: %v", p, err)
			continue
		}
		conf.files = append(conf.files, p)
		conf.parse(p, data)
	}
	return conf
}

// readConfFile reads a configuration file as a regular file only, within
// maxConfFile: a FIFO would hold the reload (and the client's reader that
// asked for it) until someone writes into it, and a device such as
// /dev/zero would never end. A symbolic link is followed, as systemd
// follows it: an operator may keep drop-ins elsewhere (a ConfigMap
// volume's files are links), and what the link reaches is held to the
// same rules.
func readConfFile(path string) ([]byte, error) {
	data, err := linux.ReadRegularFile(path, maxConfFile, linux.FollowLink)
	if errors.Is(err, linux.ErrTooLarge) {
		return nil, fmt.Errorf("larger than %d bytes, ignored", maxConfFile)
	}
	return data, err
}

// isDevNull reports whether path is, or leads to, the null device.
func isDevNull(path string) bool {
	var st, null unix.Stat_t
	return unix.Stat(path, &st) == nil && unix.Stat(os.DevNull, &null) == nil &&
		st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == null.Rdev
}

func (conf *logindConf) problem(format string, args ...any) {
	if len(conf.problems) < maxConfProblem {
		conf.problems = append(conf.problems, fmt.Sprintf(format, args...))
	}
}

// parse reads one file in the syntax of systemd.syntax(7): "[Section]"
// headers, "Key=Value" assignments with the white space around both
// dropped, lines starting with '#' or ';' as comments, and a backslash at
// the end of a line joining the next one to it (a comment line inside such
// a continuation is dropped). Only [Login] InhibitDelayMaxSec matters here.
func (conf *logindConf) parse(file string, data []byte) {
	section := ""
	var cont strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxConfFile)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if cont.Len() > 0 && (strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";")) {
			continue
		}
		if s, ok := strings.CutSuffix(line, `\`); ok {
			cont.WriteString(s)
			cont.WriteByte(' ')
			continue
		}
		if cont.Len() > 0 {
			cont.WriteString(line)
			line = strings.TrimSpace(cont.String())
			cont.Reset()
		}
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[':
			if !strings.HasSuffix(line, "]") {
				conf.problem("%s:%d: invalid section header %q", file, n, line)
				section = ""
				continue
			}
			section = line[1 : len(line)-1]
		default:
			key, value, ok := strings.Cut(line, "=")
			if !ok {
				conf.problem("%s:%d: missing '=', ignoring line", file, n)
				continue
			}
			key, value = strings.TrimSpace(key), strings.TrimSpace(value)
			if section != "Login" || key != "InhibitDelayMaxSec" {
				continue
			}
			d, err := parseTimespan(value)
			if err != nil {
				conf.problem("%s:%d: failed to parse InhibitDelayMaxSec=%s, ignoring: %v", file, n, value, err)
				continue
			}
			conf.delay, conf.set, conf.from = d, true, file
		}
	}
	if err := sc.Err(); err != nil {
		conf.problem("%s: %v", file, err)
	}
}

// timeUnits are systemd.time(7)'s units, in the order systemd tries them:
// the first that starts the text wins, so "ms" is tried before "m" and
// "min" before "m".
var timeUnits = []struct {
	suffix string
	unit   float64 // seconds
}{
	{"seconds", 1}, {"second", 1}, {"sec", 1}, {"s", 1},
	{"minutes", 60}, {"minute", 60}, {"min", 60},
	{"months", 2629800}, {"month", 2629800}, {"M", 2629800},
	{"msec", 1e-3}, {"ms", 1e-3}, {"m", 60},
	{"hours", 3600}, {"hour", 3600}, {"hr", 3600}, {"h", 3600},
	{"days", 86400}, {"day", 86400}, {"d", 86400},
	{"weeks", 604800}, {"week", 604800}, {"w", 604800},
	{"years", 31557600}, {"year", 31557600}, {"y", 31557600},
	{"usec", 1e-6}, {"us", 1e-6}, {"μs", 1e-6}, {"µs", 1e-6},
}

// errInfinity is the time span "infinity": logind takes it, but nodeinit
// bounds every wait of its own.
var errInfinity = errors.New("infinity: nodeinit bounds the drain")

// parseTimespan parses a time span as systemd's parse_sec does: one or
// more numbers (a fraction allowed), each with an optional unit, white
// space allowed between and around them ("30s", "1min 30s", "1h30m",
// "1.5h"); a number without a unit is seconds.
func parseTimespan(s string) (time.Duration, error) {
	p := strings.TrimSpace(s)
	if p == "infinity" {
		return 0, errInfinity
	}
	if p == "" {
		return 0, errors.New("empty")
	}
	var total float64
	for p != "" {
		if p[0] == '-' {
			return 0, errors.New("negative")
		}
		end := 0
		for end < len(p) && (p[end] >= '0' && p[end] <= '9' || p[end] == '.') {
			end++
		}
		if end == 0 || strings.Count(p[:end], ".") > 1 || p[:end] == "." {
			return 0, fmt.Errorf("%q is not a number", p)
		}
		n, err := strconv.ParseFloat(p[:end], 64)
		if err != nil {
			return 0, err
		}
		p = strings.TrimLeft(p[end:], " \t")
		unit := 1.0
		for _, u := range timeUnits {
			if rest, ok := strings.CutPrefix(p, u.suffix); ok {
				unit, p = u.unit, rest
				break
			}
		}
		total += n * unit
		p = strings.TrimLeft(p, " \t")
	}
	if total*float64(time.Second) > math.MaxInt64 {
		return 0, errors.New("out of range")
	}
	return time.Duration(total * float64(time.Second)), nil
}
