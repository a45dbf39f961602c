package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// maxFileSize bounds what nodeinit reads, so a config path pointing at a
// device or a huge file fails instead of filling memory.
const maxFileSize = 1 << 20

// Load reads a NodeInitConfig file (YAML or JSON) over Default(): fields the
// file leaves out keep their defaults, except kind and apiVersion, which the
// file must state. It does not Validate. Every error is a *FileError naming
// the file; unknown fields and values of the wrong type are each reported
// with their path.
func Load(file string) (Config, error) {
	c, _, err := load(file)
	return c, err
}

// load is Load that also returns ownerWarning's word on the file.
func load(file string) (c Config, warning string, err error) {
	f, err := os.Open(file)
	if err != nil {
		return Config{}, "", &FileError{File: file, Err: err}
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil {
		warning = ownerWarning(file, fi)
	}
	c, err = read(file, f)
	return c, warning, err
}

// read reads an open NodeInitConfig file.
func read(file string, f *os.File) (Config, error) {
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return Config{}, &FileError{File: file, Err: err}
	}
	if len(data) > maxFileSize {
		return Config{}, &FileError{File: file, Err: fmt.Errorf("the file is larger than %d bytes", maxFileSize)}
	}
	return decode(file, data)
}

func decode(file string, data []byte) (Config, error) {
	// First find every unknown field and mistyped value, with its path: the
	// decoder below reports only the first, without a path.
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return Config{}, &FileError{File: file, Err: err}
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	var raw any
	if err := dec.Decode(&raw); err != nil {
		return Config{}, &FileError{File: file, Err: err}
	}
	if raw != nil {
		if _, ok := raw.(map[string]any); !ok {
			return Config{}, &FileError{File: file, Err: errors.New("the document must be a mapping of " + Kind + " fields")}
		}
	}
	var errs []FieldError
	check("", raw, reflect.TypeFor[Config](), &errs)
	if len(errs) > 0 {
		// Report the bad values of the fields that are known too, so that
		// one run lists every bad field: decode again, skipping unknown
		// fields (a mistyped value stops it; those are listed already).
		lenient := Default()
		lenient.Kind, lenient.APIVersion = "", ""
		if yaml.Unmarshal(data, &lenient) == nil {
			errs = append(errs, lenient.Validate()...)
		}
		return Config{}, &FileError{File: file, Fields: errs}
	}

	c := Default()
	c.Kind, c.APIVersion = "", ""
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return Config{}, &FileError{File: file, Err: err}
	}
	return c, nil
}

// check compares a decoded JSON value with the Go type it will be decoded
// into and records every field the type does not have and every value it
// cannot hold. It accepts what sigs.k8s.io/yaml converts on the way: a YAML
// number or boolean where a string is wanted becomes that string.
func check(path string, raw any, t reflect.Type, errs *[]FieldError) {
	if raw == nil {
		return
	}
	// An optional field (a pointer) holds what its element type holds.
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Struct && !reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		m, ok := raw.(map[string]any)
		if !ok {
			*errs = append(*errs, FieldError{Type: ErrorTypeInvalid, Field: path, BadValue: raw, Detail: "must be a mapping of fields"})
			return
		}
		fields := jsonFields(t)
		for _, k := range slices.Sorted(maps.Keys(m)) {
			sub := join(path, k)
			f, ok := fields[k]
			if !ok {
				e := FieldError{Type: ErrorTypeUnknown, Field: sub}
				for name := range fields {
					if strings.EqualFold(name, k) {
						e.Detail = fmt.Sprintf("did you mean %q?", name)
					}
				}
				*errs = append(*errs, e)
				continue
			}
			check(sub, m[k], f.Type, errs)
		}
		return
	}
	if t.Kind() == reflect.Slice {
		l, ok := raw.([]any)
		if !ok {
			*errs = append(*errs, FieldError{Type: ErrorTypeInvalid, Field: path, BadValue: raw, Detail: "must be a list of strings"})
			return
		}
		for i, x := range l {
			check(fmt.Sprintf("%s[%d]", path, i), x, t.Elem(), errs)
		}
		return
	}
	if t.Kind() == reflect.String {
		switch raw.(type) {
		case string, json.Number, bool:
			return
		}
		*errs = append(*errs, FieldError{Type: ErrorTypeInvalid, Field: path, BadValue: raw, Detail: "must be a string"})
		return
	}
	b, err := json.Marshal(raw)
	if err == nil {
		err = json.Unmarshal(b, reflect.New(t).Interface())
	}
	if err != nil {
		detail := err.Error()
		switch {
		case reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()):
			// Its own message says what it accepts.
		case t.Kind() == reflect.Int || t.Kind() == reflect.Int32 || t.Kind() == reflect.Int64:
			detail = fmt.Sprintf("must be a whole number that fits in %d bits", t.Bits())
		case t.Kind() == reflect.Bool:
			detail = "must be true or false"
		}
		*errs = append(*errs, FieldError{Type: ErrorTypeInvalid, Field: path, BadValue: raw, Detail: detail})
	}
}

// jsonFields maps the JSON names of a struct's fields to the fields.
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	m := make(map[string]reflect.StructField, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
			m[name] = f
		}
	}
	return m
}

// join appends a key to a field path, quoting keys that are not plain names
// so that an empty or dotted key still shows.
func join(path, name string) string {
	if name == "" || strings.ContainsFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-')
	}) {
		name = strconv.Quote(name)
	}
	if path == "" {
		return name
	}
	return path + "." + name
}
