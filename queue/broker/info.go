package broker

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2/server"
)

// emulatedRedisVersion is the version the embedded store reports in INFO. It
// is the one miniredis itself reports in HELLO, so the two agree.
const emulatedRedisVersion = "8.4.0"

const miniredisModule = "github.com/alicebob/miniredis/v2"

// infoShim answers INFO for the embedded store. miniredis's own INFO has
// three fields (one glued to its section header by a bare \n), so tools such
// as asynq's RedisInfo find no redis_version, memory or role.
//
// It runs as the server's pre-hook, which also sees commands called from Lua
// while EVAL holds miniredis's global lock: it must never call miniredis's Go
// accessors (m.Keys, m.DB, ...), which take that lock again. It reads only
// server counters and process figures, and asks miniredis's own INFO, through
// Dispatch on the caller's connection state, for the auth check and the
// client and command counts. Like miniredis's own INFO without arguments, it
// answers at once inside MULTI instead of queueing (asynq never does that).
type infoShim struct {
	srv       *server.Server
	tcpPort   string
	started   time.Time
	runID     string
	miniredis string
	pid       int

	probes  sync.Map // *server.Peer of an in-flight probe → struct{}
	peakMem atomic.Uint64
}

func newInfoShim(srv *server.Server, exposedAddr string, started time.Time) *infoShim {
	port := "0"
	if exposedAddr != "" {
		if _, p, err := net.SplitHostPort(exposedAddr); err == nil {
			port = p
		}
	}
	id := make([]byte, 20)
	_, _ = rand.Read(id) // crypto/rand.Read never fails
	return &infoShim{
		srv:       srv,
		tcpPort:   port,
		started:   started,
		runID:     hex.EncodeToString(id),
		miniredis: moduleVersion(miniredisModule),
		pid:       os.Getpid(),
	}
}

// hook is a server.Hook: it returns true when it answered the command.
func (s *infoShim) hook(c *server.Peer, cmd string, args ...string) bool {
	if cmd != "INFO" {
		return false
	}
	if _, probing := s.probes.Load(c); probing {
		return false // our own probe: let miniredis answer it
	}
	counts, errMsg := s.probe(c)
	if errMsg != "" {
		c.WriteError(errMsg)
		return true
	}
	c.WriteBulk(s.render(args, counts))
	return true
}

// probe runs miniredis's own INFO with c's connection state, so that its
// checks (AUTH required, subscribed mode) apply, and returns the fields it
// reports, or the error to send.
func (s *infoShim) probe(c *server.Peer) (map[string]string, string) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	p := server.NewPeer(w)
	p.Ctx = c.Ctx
	s.probes.Store(p, struct{}{})
	s.srv.Dispatch(p, []string{"INFO"})
	s.probes.Delete(p)
	_ = w.Flush() // a bytes.Buffer does not fail
	if c.Ctx == nil {
		c.Ctx = p.Ctx // keep the connection state miniredis created
	}

	if bytes.HasPrefix(buf.Bytes(), []byte("-")) {
		line, _, _ := strings.Cut(buf.String()[1:], "\r\n")
		return nil, line
	}
	reply, err := server.ParseReply(bufio.NewReader(&buf))
	text, ok := reply.(string)
	if err != nil || !ok {
		return nil, fmt.Sprintf("ERR broker: unexpected INFO reply from the embedded store: %q", buf.String())
	}
	fields := map[string]string{}
	for _, line := range strings.FieldsFunc(text, func(r rune) bool { return r == '\r' || r == '\n' }) {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = v
		}
	}
	return fields, ""
}

type infoSection struct {
	name   string
	fields func(counts map[string]string) [][2]string
}

// render builds the INFO text for the asked sections, in Redis's format:
// "# Section" headers, "key:value" lines, all ending in \r\n, a blank line
// between sections. Like Redis, it returns nothing for an unknown section.
func (s *infoShim) render(args []string, counts map[string]string) string {
	sections := s.sections()
	want := map[string]bool{}
	all := len(args) == 0
	for _, a := range args {
		switch a = strings.ToLower(a); a {
		case "all", "everything", "default":
			all = true
		default:
			want[a] = true
		}
	}
	var b strings.Builder
	for _, sec := range sections {
		if !all && !want[sec.name] {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString("# " + strings.ToUpper(sec.name[:1]) + sec.name[1:] + "\r\n")
		for _, kv := range sec.fields(counts) {
			b.WriteString(kv[0] + ":" + kv[1] + "\r\n")
		}
	}
	return b.String()
}

// sections lists what the embedded store reports. There is no Keyspace
// section: counting keys needs miniredis's global lock, which a call from Lua
// already holds (DBSIZE answers it instead).
func (s *infoShim) sections() []infoSection {
	return []infoSection{
		{"server", func(map[string]string) [][2]string {
			up := time.Since(s.started)
			return [][2]string{
				{"redis_version", emulatedRedisVersion},
				{"redis_mode", "standalone"},
				{"server_name", "miniredis"},
				{"miniredis_version", s.miniredis},
				{"os", runtime.GOOS + " " + runtime.GOARCH},
				{"arch_bits", strconv.Itoa(strconv.IntSize)},
				{"go_version", runtime.Version()},
				{"process_id", strconv.Itoa(s.pid)},
				{"run_id", s.runID},
				{"tcp_port", s.tcpPort},
				{"uptime_in_seconds", strconv.FormatInt(int64(up/time.Second), 10)},
				{"uptime_in_days", strconv.FormatInt(int64(up/(24*time.Hour)), 10)},
			}
		}},
		{"clients", func(c map[string]string) [][2]string {
			return [][2]string{
				{"connected_clients", orZero(c["connected_clients"])},
				{"blocked_clients", "0"},
			}
		}},
		{"memory", func(map[string]string) [][2]string {
			// The store lives in this process's Go heap: these are the
			// process's figures, store included.
			heap, total := goMemory()
			peak := s.notePeak(heap)
			return [][2]string{
				{"used_memory", strconv.FormatUint(heap, 10)},
				{"used_memory_human", humanBytes(heap)},
				{"used_memory_rss", strconv.FormatUint(total, 10)},
				{"used_memory_rss_human", humanBytes(total)},
				{"used_memory_peak", strconv.FormatUint(peak, 10)},
				{"used_memory_peak_human", humanBytes(peak)},
				{"maxmemory", "0"},
				{"maxmemory_human", "0B"},
				{"maxmemory_policy", "noeviction"},
			}
		}},
		{"persistence", func(map[string]string) [][2]string {
			return [][2]string{
				{"loading", "0"},
				{"rdb_bgsave_in_progress", "0"},
				{"rdb_last_bgsave_status", "ok"},
				{"aof_enabled", "0"},
			}
		}},
		{"stats", func(c map[string]string) [][2]string {
			return [][2]string{
				{"total_connections_received", orZero(c["total_connections_received"])},
				{"total_commands_processed", orZero(c["total_commands_processed"])},
			}
		}},
		{"replication", func(map[string]string) [][2]string {
			return [][2]string{
				{"role", "master"},
				{"connected_slaves", "0"},
			}
		}},
	}
}

func (s *infoShim) notePeak(v uint64) uint64 {
	for {
		old := s.peakMem.Load()
		if v <= old {
			return old
		}
		if s.peakMem.CompareAndSwap(old, v) {
			return v
		}
	}
}

// goMemory returns the bytes of live heap objects and all memory the Go
// runtime has mapped. It does not stop the world.
func goMemory() (heap, total uint64) {
	samples := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/total:bytes"},
	}
	metrics.Read(samples)
	if samples[0].Value.Kind() == metrics.KindUint64 {
		heap = samples[0].Value.Uint64()
	}
	if samples[1].Value.Kind() == metrics.KindUint64 {
		total = samples[1].Value.Uint64()
	}
	return heap, total
}

// humanBytes formats n as Redis does in its *_human fields (1.50M).
func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatUint(n, 10) + "B"
	}
	const suffixes = "KMGTP"
	f, i := float64(n)/unit, 0
	for f >= unit && i < len(suffixes)-1 {
		f /= unit
		i++
	}
	return strconv.FormatFloat(f, 'f', 2, 64) + suffixes[i:i+1]
}

func orZero(s string) string {
	if s == "" {
		return "0"
	}
	return s
}

// moduleVersion returns the version of module path in this binary's build
// information, or "unknown".
func moduleVersion(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			if d.Replace != nil {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return "unknown"
}
