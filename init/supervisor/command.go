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
	CodeNotFound      = 127
	CodeNotExecutable = 126
)

// StartError is a task that could not be started. Code is the exit status
// nodeinit reports for it: 127 when the command does not exist, 126 when it
// exists but cannot be executed.
type StartError struct {
	Task string
	Path string
	Err  error
	Code int
}

func (e *StartError) Error() string {
	return fmt.Sprintf("cannot start %s %q: %v", e.Task, e.Path, e.Err)
}

func (e *StartError) Unwrap() error { return e.Err }

// ExitCode is the exit status nodeinit reports for a task that could not be
// started: the StartError's 126 or 127. It is the one place that decides it.
func ExitCode(err error) int {
	var se *StartError
	if errors.As(err, &se) {
		return se.Code
	}
	return CodeNotExecutable
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

// Resolve finds the program that a task names, the way execvp would: a name
// with a slash is taken as a path, any other is searched in pathList (the
// PATH the task will run with). It fails with a *StartError whose Code tells
// not found (127) from not executable (126).
func Resolve(task, name, pathList string) (string, error) {
	if name == "" {
		return "", &StartError{Task: task, Path: name, Err: errors.New("empty command"), Code: CodeNotFound}
	}
	if strings.Contains(name, "/") {
		if err := executable(name); err != nil {
			return "", startError(task, name, err)
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
		return "", startError(task, name, denied)
	}
	return "", &StartError{Task: task, Path: name, Err: fmt.Errorf("not found in PATH %q", pathList), Code: CodeNotFound}
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

// startError classifies an error of stat or execve. ENOENT from execve on a
// file that exists means its interpreter is missing: that is "cannot
// execute" (126), as in a shell, not "not found".
func startError(task, path string, err error) *StartError {
	code := CodeNotExecutable
	if errors.Is(err, fs.ErrNotExist) {
		code = CodeNotFound
		if _, statErr := os.Stat(path); statErr == nil {
			code = CodeNotExecutable
			err = fmt.Errorf("bad interpreter: %w", err)
		}
	}
	return &StartError{Task: task, Path: path, Err: err, Code: code}
}
