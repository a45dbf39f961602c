package config

import (
	"math/big"
	"strings"
	"testing"
)

func TestParseSizeRoundsToWholeMebibytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Mebibytes
	}{
		{"10Mi", 10},
		{"1Mi", 1},
		{"1Gi", 1024},
		{"1.5Gi", 1536},
		{"2Ti", 2 << 20},
		{"1Pi", 1 << 30},
		{"8Ei", 1 << 43},
		{"1024Ki", 1},
		{"1536Ki", 2}, // 1.5 MiB rounds half up
		{"1535Ki", 1},
		{"1Ki", 1}, // at least 1
		{"0", 1},
		{"0Mi", 1},
		{"1048576", 1}, // plain bytes
		{"10485760", 10},
		{"1572864", 2},
		{"100M", 95}, // 100e6 / 2^20 = 95.37
		{"1G", 954},  // 953.67
		{"1k", 1},
		{"1T", 953674},
		{"1E", 953674316406}, // 953674316406.25
		{"+5Mi", 5},
		{".5Gi", 512},
		{"1.Gi", 1024},
		{"0.1Mi", 1},
		{"2.50000000000000000000Mi", 3}, // trailing zeros do not count as places
		{"0001Gi", 1024},
		{"1.1Mi", 1},
		{"1153434", 1},
	} {
		got, err := parseSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestParseSizeRejectsWhatIsNotAQuantity(t *testing.T) {
	for _, tc := range []struct{ in, err string }{
		{"", "must be a quantity"},
		{"Mi", "must be a quantity"},
		{"10MB", "must be a quantity"},
		{"10K", "must be a quantity"}, // Kubernetes' kilo is k
		{"10 Mi", "must be a quantity"},
		{"1e6", "must be a quantity"},
		{"1.2.3Mi", "must be a quantity"},
		{"0x10", "must be a quantity"},
		{"10m", "must be a quantity"}, // milli-bytes make no sense
		{".", "must be a quantity"},
		{"-1Mi", "must not be negative"},
		{"9Ei", "must be at most 8Ei"},
		{"99999999999999999999", "must be at most 8Ei"},
		{"18446744073709551616Ki", "must be at most 8Ei"},
		{"1.0000000000001Mi", "at most 12 decimal places"},
	} {
		got, err := parseSize(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ParseSize(%q) = %d, %v; want an error saying %q", tc.in, got, err, tc.err)
		}
	}
}

// refSize computes what ParseSize should return with exact rational
// arithmetic, for accepted inputs.
func refSize(s string) (int64, bool) {
	num, mult := s, int64(1)
	for _, x := range suffixes {
		if strings.HasSuffix(s, x.s) {
			num, mult = strings.TrimSuffix(s, x.s), int64(x.m)
			break
		}
	}
	r, ok := new(big.Rat).SetString(strings.TrimPrefix(num, "+"))
	if !ok {
		return 0, false
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	r.Quo(r, new(big.Rat).SetInt64(1<<20))
	r.Add(r, big.NewRat(1, 2)) // round half up
	q := new(big.Int).Quo(r.Num(), r.Denom())
	if !q.IsInt64() {
		return 0, false
	}
	return max(q.Int64(), 1), true
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"10Mi", "1.5Gi", "100M", "1048576", "0", ".5Ki", "8Ei", "1.000000000001E", "+3k", "-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseSize(s)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("ParseSize(%q): empty error", s)
			}
			return
		}
		if got < 1 || got > maxMebibytes {
			t.Fatalf("ParseSize(%q) = %d: out of range", s, got)
		}
		want, ok := refSize(s)
		if !ok || int64(got) != want {
			t.Fatalf("ParseSize(%q) = %d; exact arithmetic says %d (ok=%v)", s, got, want, ok)
		}
		if back, err := parseSize(got.String()); err != nil || back != got {
			t.Fatalf("ParseSize(%q) = %d, but its String %q reads back as %d, %v", s, got, got.String(), back, err)
		}
	})
}
