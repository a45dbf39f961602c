package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
)

// ErrorType is the kind of a FieldError, rendered as Kubernetes does.
type ErrorType string

// The field error types a NodeInitConfig can have.
const (
	ErrorTypeInvalid     ErrorType = "Invalid value"
	ErrorTypeUnsupported ErrorType = "Unsupported value"
	ErrorTypeRequired    ErrorType = "Required value"
	ErrorTypeForbidden   ErrorType = "Forbidden"
	ErrorTypeUnknown     ErrorType = "Unknown field"
)

// FieldError is one bad field, named by its path in the file
// ("proxy.conntrack.min").
type FieldError struct {
	Type     ErrorType
	Field    string
	BadValue any
	Detail   string
	// related is another field the error depends on (for "max < initial"),
	// so a flag that set either one makes it a usage error.
	related string
}

// Error renders the error like Kubernetes' field.Error:
// `proxy.mode: Unsupported value: "userspace": supported values: ...`.
func (e FieldError) Error() string {
	s := e.Field + ": " + string(e.Type)
	switch e.Type {
	case ErrorTypeInvalid, ErrorTypeUnsupported:
		s += ": " + renderValue(e.BadValue)
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

func renderValue(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("%q", v)
	case json.Number, int, int32, int64, bool, nil:
		return fmt.Sprint(v)
	case fmt.Stringer:
		return fmt.Sprintf("%q", v.String())
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// FileError is a config file nodeinit cannot use: unreadable, not YAML or
// JSON, or with bad fields. main prints it on stderr and exits 255.
type FileError struct {
	File string
	// Err is why the file could not be read or parsed at all; nil when it
	// was read and only Fields are bad.
	Err    error
	Fields []FieldError
}

func (e *FileError) Error() string {
	var pe *fs.PathError
	if errors.As(e.Err, &pe) {
		return fmt.Sprintf("cannot read config file %s: %v", e.File, pe.Err)
	}
	var b strings.Builder
	b.WriteString("Invalid " + Kind + " " + e.File)
	if e.Err != nil {
		// Decoder messages can span lines; keep one per line, indented.
		for _, line := range strings.Split(e.Err.Error(), "\n") {
			if line = strings.TrimSpace(line); line != "" {
				b.WriteString("\n  " + line)
			}
		}
	}
	for _, f := range e.Fields {
		b.WriteString("\n  " + f.Error())
	}
	return b.String()
}

func (e *FileError) Unwrap() error { return e.Err }

// UsageError is a bad command line: a flag value, a missing EXECUTOR, or
// flags that exclude each other. Its message is one line; main prints it and
// exits 2, as it does when FlagSet.Parse fails.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }
