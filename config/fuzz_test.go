package config

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// FuzzLoad feeds arbitrary files to the loader and the validator: they never
// panic, every rejection is a *FileError that names the file and, field by
// field, the field; whatever is accepted writes back to a file that reads the
// same.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(header + "proxy: {mode: ipvs, args: [--a, 1]}\nlogging: {maxSize: 1.5Gi}\n"))
	f.Add([]byte(`{"kind":"NodeInitConfig","apiVersion":"nodeinit/v1alpha1","shutdownGracePeriod":"-1s"}`))
	f.Add([]byte("proxy:\n  Mode: x\n  conntrack: [1]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := decode("f.yaml", data)
		if err != nil {
			var fe *FileError
			if !errors.As(err, &fe) || !strings.HasPrefix(err.Error(), "Invalid NodeInitConfig f.yaml") {
				t.Fatalf("rejection %T %q does not name the file", err, err)
			}
			if fe.Err == nil && len(fe.Fields) == 0 {
				t.Fatalf("rejection without a reason: %q", err)
			}
			for _, e := range fe.Fields {
				if e.Field == "" {
					t.Fatalf("field error without a field: %q", e.Error())
				}
			}
			return
		}
		for _, e := range c.Validate() {
			if e.Field == "" || !strings.HasPrefix(e.Error(), e.Field+": ") {
				t.Fatalf("validation error without a field: %q", e.Error())
			}
		}
		out, err := yaml.Marshal(c)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		again, err := decode("f.yaml", out)
		if err != nil {
			t.Fatalf("the accepted config written back does not read back: %v\n%s", err, out)
		}
		if out2, _ := yaml.Marshal(again); !bytes.Equal(out, out2) {
			t.Fatalf("the config changed on a round trip:\n%s\n---\n%s", out, out2)
		}
	})
}
