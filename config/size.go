package config

import (
	"encoding/json"
	"errors"
	"math/bits"
	"strconv"
	"strings"
)

// Mebibytes is a log file size in whole MiB (what the rotating writer takes),
// written in the file and on the command line as a Kubernetes quantity.
type Mebibytes int

// maxMebibytes is the largest log file size: 8Ei, the most bytes an int64
// holds, where an int has 64 bits; 1Pi where it has 32 (arm/v7, 386), the
// largest binary unit a 32-bit Mebibytes holds. Both are beyond any disk.
const maxMebibytes = 1 << 30 << (13 * (bits.UintSize / 64))

// maxQuantity writes maxMebibytes as a quantity, for messages.
func maxQuantity() string {
	if bits.UintSize == 32 {
		return "1Pi"
	}
	return "8Ei"
}

var errSize = errors.New(`must be a quantity like "10Mi", "1.5Gi", "500M" or plain bytes`)

// suffixes maps a quantity suffix to its multiplier in bytes. Kubernetes
// spells the decimal kilo "k" and has no "K".
var suffixes = []struct {
	s string
	m uint64
}{
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"Pi", 1 << 50}, {"Ei", 1 << 60},
	{"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"P", 1e15}, {"E", 1e18},
}

// parseSize reads a Kubernetes quantity (binary suffixes Ki..Ei, decimal
// suffixes k..E, or plain bytes; decimals allowed) and returns it in MiB,
// rounded to the nearest whole MiB and at least 1. It computes exactly, with
// no floating point, so "1.1Mi" and "1153434" agree.
func parseSize(s string) (Mebibytes, error) {
	num, mult := s, uint64(1)
	for _, x := range suffixes {
		if strings.HasSuffix(s, x.s) {
			num, mult = strings.TrimSuffix(s, x.s), x.m
			break
		}
	}
	num = strings.TrimPrefix(num, "+")
	if strings.HasPrefix(num, "-") {
		return 0, errors.New("must not be negative")
	}
	whole, frac, _ := strings.Cut(num, ".")
	if whole == "" && frac == "" || !digits(whole) || !digits(frac) || strings.Count(num, ".") > 1 {
		return 0, errSize
	}
	frac = strings.TrimRight(frac, "0")
	// 10^12 * 2^20 still fits the 64-bit divisor below.
	if len(frac) > 12 {
		return 0, errors.New("must have at most 12 decimal places")
	}
	// n is the number without its decimal point: the value is n * mult / 10^len(frac).
	var n uint64
	for _, c := range strings.TrimLeft(whole, "0") + frac {
		hi, lo := bits.Mul64(n, 10)
		lo, carry := bits.Add64(lo, uint64(c-'0'), 0)
		if hi != 0 || carry != 0 {
			return 0, errTooLarge
		}
		n = lo
	}
	div := uint64(1 << 20)
	for range len(frac) {
		div *= 10
	}
	hi, lo := bits.Mul64(n, mult)
	if hi >= div {
		return 0, errTooLarge
	}
	q, r := bits.Div64(hi, lo, div)
	if r >= div-r {
		q++
	}
	if q > maxMebibytes {
		return 0, errTooLarge
	}
	return Mebibytes(max(q, 1)), nil
}

var errTooLarge = errors.New("must be at most " + maxQuantity())

func digits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// String writes the size as a quantity, like "10Mi".
func (m Mebibytes) String() string { return strconv.Itoa(int(m)) + "Mi" }

// Set parses a quantity given on the command line.
func (m *Mebibytes) Set(s string) error {
	v, err := parseSize(s)
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// Type names the flag's value in --help.
func (m *Mebibytes) Type() string { return "quantity" }

// MarshalJSON writes the size as a quantity string.
func (m Mebibytes) MarshalJSON() ([]byte, error) { return json.Marshal(m.String()) }

// UnmarshalJSON reads a quantity string or a plain number of bytes.
func (m *Mebibytes) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if json.Unmarshal(b, &s) != nil {
		var n json.Number
		if json.Unmarshal(b, &n) != nil {
			return errSize
		}
		s = n.String()
	}
	return m.Set(s)
}
