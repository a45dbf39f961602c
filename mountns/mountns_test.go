package mountns

import (
	"strings"
	"testing"

	"github.com/nodeinit/nodeinit/internal/procstatus"
)

func TestExplainEPERMNamesTheCause(t *testing.T) {
	tests := []struct {
		name   string
		status procstatus.Status
		want   string
	}{
		{"no capability", procstatus.Status{"CapEff": "00000000a80425fb", "Seccomp": "0"}, "needs root or CAP_SYS_ADMIN"},
		{"seccomp", procstatus.Status{"CapEff": "000001ffffffffff", "Seccomp": "2"}, "seccomp"},
		{"user namespace", procstatus.Status{"CapEff": "000001ffffffffff", "Seccomp": "0"}, "user namespace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := explainEPERM(tt.status); !strings.Contains(got, tt.want) {
				t.Errorf("explainEPERM = %q, want it to mention %q", got, tt.want)
			}
		})
	}
}
