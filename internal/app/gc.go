package app

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// tuneGC applies the garbage collector settings serve and bench run with:
// a high GOGC (most garbage is the embedded broker's short-lived Lua
// states, so collecting less often buys throughput) bounded by a soft
// memory limit (so a burst cannot grow the heap without bound). The
// standard GOGC and GOMEMLIMIT variables, when set, win.
func TuneGC(gogc int, limit int64) {
	if gogc > 0 && os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gogc)
	}
	if limit > 0 && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(limit)
	}
}

// byteSize is a flag value such as 64MiB, 1GiB or 0 (none).
type byteSize int64

func (b *byteSize) Set(s string) error {
	n, err := parseByteSize(s)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

func (b *byteSize) String() string {
	v := int64(*b)
	switch {
	case v == 0:
		return "0"
	case v%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", v>>30)
	case v%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", v>>20)
	case v%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", v>>10)
	}
	return strconv.FormatInt(v, 10)
}

func parseByteSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, errors.New("want a size such as 64MiB or 1GiB, or 0")
	}
	return n * mult, nil
}
