package node

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// quantitySuffixes are the multipliers of Kubernetes' resource quantities
// (k8s.io/apimachinery/pkg/api/resource): binary Ki..Ei, decimal n..E.
var quantitySuffixes = map[string]*big.Rat{
	"":   big.NewRat(1, 1),
	"n":  big.NewRat(1, 1e9),
	"u":  big.NewRat(1, 1e6),
	"m":  big.NewRat(1, 1e3),
	"k":  big.NewRat(1e3, 1),
	"M":  big.NewRat(1e6, 1),
	"G":  big.NewRat(1e9, 1),
	"T":  big.NewRat(1e12, 1),
	"P":  big.NewRat(1e15, 1),
	"E":  big.NewRat(1e18, 1),
	"Ki": new(big.Rat).SetInt64(1 << 10),
	"Mi": new(big.Rat).SetInt64(1 << 20),
	"Gi": new(big.Rat).SetInt64(1 << 30),
	"Ti": new(big.Rat).SetInt64(1 << 40),
	"Pi": new(big.Rat).SetInt64(1 << 50),
	"Ei": new(big.Rat).SetInt64(1 << 60),
}

// ParseQuantity reads a Kubernetes resource quantity ("3Gi", "500m",
// "1.5", "1e3") exactly, as the kubelet reads its reservations and the
// API server writes a Node's capacity and allocatable.
func ParseQuantity(s string) (*big.Rat, error) {
	num, suffix := s, ""
	if i := strings.IndexAny(s, "eE"); i > 0 && i < len(s)-1 {
		// A decimal exponent (1e3, 2E-3), unless what follows the E is
		// no number: then E or Ei is the suffix.
		if e, err := strconv.Atoi(s[i+1:]); err == nil {
			if e > 30 || e < -30 {
				return nil, fmt.Errorf("not a quantity: %q (exponent out of range)", s)
			}
			r, err := parseDecimal(s[:i], s)
			if err != nil {
				return nil, err
			}
			ten := new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(max(e, -e))), nil))
			if e < 0 {
				return r.Quo(r, ten), nil
			}
			return r.Mul(r, ten), nil
		}
	}
	for i := len(s); i > 0; i-- {
		c := s[i-1]
		if c >= '0' && c <= '9' || c == '.' {
			num, suffix = s[:i], s[i:]
			break
		}
	}
	mult, ok := quantitySuffixes[suffix]
	if !ok {
		return nil, fmt.Errorf("not a quantity: %q (unknown suffix %q)", s, suffix)
	}
	r, err := parseDecimal(num, s)
	if err != nil {
		return nil, err
	}
	return r.Mul(r, mult), nil
}

func parseDecimal(num, s string) (*big.Rat, error) {
	if num == "" || strings.Trim(num, "+-.0123456789") != "" || strings.Count(num, ".") > 1 {
		return nil, fmt.Errorf("not a quantity: %q", s)
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return nil, fmt.Errorf("not a quantity: %q", s)
	}
	return r, nil
}

// ceilScaled is ⌈q·scale⌉ as an int64: a quantity in whole units (bytes,
// processes; scale 1) or millicores (scale 1000), rounded up as the
// kubelet's Quantity.Value and MilliValue do.
func ceilScaled(q *big.Rat, scale int64) int64 {
	r := new(big.Rat).Mul(q, big.NewRat(scale, 1))
	n, rem := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if rem.Sign() > 0 {
		n.Add(n, big.NewInt(1))
	}
	if !n.IsInt64() {
		return 1<<63 - 1
	}
	return n.Int64()
}
