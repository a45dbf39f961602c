package supervisor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Exit codes for a command that cannot be run, as a shell reports them.
const (
	codeNotFound      = 127
	codeNotExecutable = 126
)

// cannotStart is a task that could not be started. Code is the exit status
// nodeinit reports for it: 127 when the command does not exist, 126 when it
// exists but cannot be executed.
type cannotStart struct {
	Task string
	Path string
	Err  error
	Code int
}

func (e *cannotStart) Error() string {
	return fmt.Sprintf("cannot start %s %q: %v", e.Task, e.Path, e.Err)
}

func (e *cannotStart) Unwrap() error { return e.Err }

// exitCodeOf is the exit status nodeinit reports for a task that could not be
// started: the cannotStart's 126 or 127. It is the one place that decides it
// (docs/design.md, rule 6).
func exitCodeOf(err error) int {
	var se *cannotStart
	if errors.As(err, &se) {
		return se.Code
	}
	return codeNotExecutable
}

// getenv is the last value of key in env, as exec would see it.
func getenv(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if s, ok := strings.CutPrefix(kv, key+"="); ok {
			v = s
		}
	}
	return v
}

// resolve finds the program that a task names, the way execvp would: a name
// with a slash is taken as a path, any other is searched in pathList (the
// PATH the task will run with). It fails with a *cannotStart whose Code tells
// not found (127) from not executable (126).
func resolve(task, name, pathList string) (string, error) {
	if name == "" {
		return "", &cannotStart{Task: task, Path: name, Err: errors.New("empty command"), Code: codeNotFound}
	}
	if strings.Contains(name, "/") {
		if err := executable(name); err != nil {
			return "", classifyStartError(task, name, err)
		}
		return name, nil
	}
	var denied error
	for _, dir := range filepath.SplitList(pathList) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		err := executable(p)
		if err == nil {
			return p, nil
		}
		if denied == nil && !errors.Is(err, fs.ErrNotExist) {
			denied = err
		}
	}
	if denied != nil {
		return "", classifyStartError(task, name, denied)
	}
	return "", &cannotStart{Task: task, Path: name, Err: fmt.Errorf("not found in PATH %q", pathList), Code: codeNotFound}
}

func executable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return syscall.EISDIR
	}
	if fi.Mode()&0o111 == 0 {
		return fs.ErrPermission
	}
	return nil
}

// classifyStartError classifies an error of stat or execve. ENOENT from
// execve on a file that exists means its interpreter is missing: that is
// "cannot execute" (126), as in a shell, not "not found".
func classifyStartError(task, path string, err error) *cannotStart {
	code := codeNotExecutable
	if errors.Is(err, fs.ErrNotExist) {
		code = codeNotFound
		if _, statErr := os.Stat(path); statErr == nil {
			code = codeNotExecutable
			err = fmt.Errorf("bad interpreter: %w", err)
		}
	}
	return &cannotStart{Task: task, Path: path, Err: err, Code: code}
}
