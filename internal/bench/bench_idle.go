package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"mailroom/internal/app"
)

// benchIdle measures what an idle `mailroom serve` costs (CPU seconds per
// minute of mailroom's process, and of redis-server's on the external
// broker; RSS at idle) and what durable tasks cost (CPU seconds per 1,000),
// on both brokers, for the task servers as they are now (each queue's
// server sleeps while the queue has nothing in flight) and as they were
// (every server always on, MAILROOM_TASK_SERVERS_ALWAYS_ON=true), all in
// one run. Each figure comes from a fresh child process (and a fresh
// redis-server) with default settings, measured by its own CPU time in
// /proc, so the benchmark's own work does not count.
func benchIdle(ctx context.Context, o Options) (Result, error) {
	var r Result
	idle, warm, tasks := time.Minute, 20*time.Second, 5000
	if o.Quick {
		idle, warm, tasks = 10*time.Second, 12*time.Second, 1000
	}
	exe := o.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return r, err
		}
	}
	r.Notes = append(r.Notes, fmt.Sprintf("an idle `mailroom serve` has default settings (no accounts, no traffic), CPU time over %s after %s of warm-up "+
		"(past the %s linger), as CPU seconds per minute; 0.6 CPU-s/min is 1%% of a core. Tasks: %d no-op debug:record tasks "+
		"through the API (the serve adds the debug queue), CPU time from the request to the last completion", idle, warm, 10*time.Second, tasks))
	redisBin, redisErr := exec.LookPath("redis-server")
	if redisErr != nil {
		r.Notes = append(r.Notes, "redis-server not measured: not installed")
	}
	for _, broker := range []string{"embedded", "redis"} {
		if broker == "redis" && redisErr != nil {
			continue
		}
		for _, alwaysOn := range []bool{true, false} {
			label := broker + " broker"
			if broker == "redis" {
				label = "redis-server"
			}
			design := "sleeping servers"
			if alwaysOn {
				design = "always-on servers (before)"
			}
			env := []string{"MAILROOM_TASK_SERVERS_ALWAYS_ON=" + strconv.FormatBool(alwaysOn)}

			o.progress("   %s, %s: idle for %s", label, design, idle+warm)
			m, err := measureIdle(ctx, exe, redisBin, broker == "redis", env, warm, idle)
			if err != nil {
				return r, fmt.Errorf("idle on %s, %s: %w", label, design, err)
			}
			name := fmt.Sprintf("idle CPU, %s, %s", label, design)
			if broker == "redis" {
				r.add(name+", mailroom", m.mailroom, "CPU-s/min")
				r.add(name+", redis-server", m.redis, "CPU-s/min")
				name = fmt.Sprintf("idle CPU, %s, %s, mailroom + redis-server", label, design)
			}
			if alwaysOn {
				r.add(name, m.mailroom+m.redis, "CPU-s/min")
			} else {
				r.addTarget(name, m.mailroom+m.redis, "CPU-s/min", 0.6, false)
			}
			r.add(fmt.Sprintf("RSS at idle, %s, %s", label, design), m.rssMiB, "MiB")

			o.progress("   %s, %s: %d durable tasks", label, design, tasks)
			c, err := measureTasks(ctx, exe, redisBin, broker == "redis", env, tasks, 12*time.Second)
			if err != nil {
				return r, fmt.Errorf("tasks on %s, %s: %w", label, design, err)
			}
			name = fmt.Sprintf("CPU per 1,000 durable tasks, %s, %s", label, design)
			if broker == "redis" {
				r.add(name+", mailroom", c.mailroom, "CPU-s")
				r.add(name+", redis-server", c.redis, "CPU-s")
			} else {
				r.add(name, c.mailroom, "CPU-s")
			}
		}
	}
	return r, nil
}

// idleFigures is what one measurement found.
type idleFigures struct {
	mailroom, redis float64 // CPU seconds per minute, or per 1,000 tasks
	rssMiB          float64
}

// measureIdle starts a serve (and a redis-server), waits warm, then reads
// their CPU time over window.
func measureIdle(ctx context.Context, exe, redisBin string, withRedis bool, env []string, warm, window time.Duration) (idleFigures, error) {
	var f idleFigures
	child, err := startServeChild(ctx, exe, redisBin, withRedis, env)
	if err != nil {
		return f, err
	}
	defer child.stop()
	if err := sleepCtx(ctx, warm); err != nil {
		return f, err
	}
	start, err := child.cpu()
	if err != nil {
		return f, err
	}
	began := time.Now()
	if err := sleepCtx(ctx, window); err != nil {
		return f, err
	}
	end, err := child.cpu()
	if err != nil {
		return f, err
	}
	perMin := time.Minute.Seconds() / time.Since(began).Seconds()
	f.mailroom = (end.mailroom - start.mailroom) * perMin
	f.redis = (end.redis - start.redis) * perMin
	f.rssMiB, err = procRSSMiB(child.cmd.Process.Pid)
	return f, err
}

// measureTasks starts a serve with the debug task type, lets it settle
// (long enough for sleeping servers to be asleep), then posts n tasks and
// reads the CPU time spent until the last completes.
func measureTasks(ctx context.Context, exe, redisBin string, withRedis bool, env []string, n int, settle time.Duration) (idleFigures, error) {
	var f idleFigures
	child, err := startServeChild(ctx, exe, redisBin, withRedis, append(env, "MAILROOM_DEBUG_TASKS=true"))
	if err != nil {
		return f, err
	}
	defer child.stop()
	if err := sleepCtx(ctx, settle); err != nil {
		return f, err
	}
	start, err := child.cpu()
	if err != nil {
		return f, err
	}
	if err := child.post("/api/v1/debug/tasks", map[string]any{"count": n}); err != nil {
		return f, err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		done, err := countLines(filepath.Join(child.dataDir, app.DebugLogName))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return f, err
		}
		if done >= n {
			break
		}
		if time.Now().After(deadline) {
			return f, fmt.Errorf("only %d of %d tasks completed in 5 minutes", done, n)
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return f, err
		}
	}
	end, err := child.cpu()
	if err != nil {
		return f, err
	}
	per := 1000 / float64(n)
	f.mailroom = (end.mailroom - start.mailroom) * per
	f.redis = (end.redis - start.redis) * per
	return f, nil
}

// serveChild is a `mailroom serve` in its own process and data dir, with
// its own redis-server when it runs on the external broker.
type serveChild struct {
	cmd     *exec.Cmd
	redis   *exec.Cmd
	url     string
	token   string
	dataDir string
	out     bytes.Buffer
}

type cpuTimes struct{ mailroom, redis float64 }

func startServeChild(ctx context.Context, exe, redisBin string, withRedis bool, env []string) (_ *serveChild, err error) {
	dir, err := os.MkdirTemp("", "mailroom-bench-idle-")
	if err != nil {
		return nil, err
	}
	tok := make([]byte, 16)
	_, _ = rand.Read(tok)
	c := &serveChild{dataDir: dir, token: hex.EncodeToString(tok)}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	// Default settings: none of the caller's MAILROOM_* variables.
	var base []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MAILROOM_") {
			base = append(base, kv)
		}
	}
	base = append(base,
		"MAILROOM_DATA_DIR="+dir,
		"MAILROOM_API_TOKEN="+c.token,
		"MAILROOM_ADMIN_PASSWORD="+c.token,
		"MAILROOM_LOG_LEVEL=warn",
	)
	if withRedis {
		raddr, err := freeLoopbackAddr()
		if err != nil {
			return nil, err
		}
		_, port, _ := net.SplitHostPort(raddr)
		c.redis = exec.Command(redisBin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
		if err := c.redis.Start(); err != nil {
			return nil, fmt.Errorf("start redis-server: %w", err)
		}
		if err := waitFor(ctx, 10*time.Second, "redis-server", func() (bool, error) {
			conn, err := net.Dial("tcp", raddr)
			if err == nil {
				conn.Close()
			}
			return err == nil, nil
		}); err != nil {
			return nil, errors.New("redis-server did not start")
		}
		base = append(base, "MAILROOM_REDIS_URL=redis://"+raddr+"/0")
	}
	// serve's port is picked once redis-server listens on its own: picked
	// before, the two free ports could be the same one (the run of
	// 2026-12-07 lost its idle figures so: "address already in use").
	addr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	c.url = "http://" + addr
	base = append(base, "MAILROOM_HTTP_ADDR="+addr)
	c.cmd = exec.Command(exe, "serve")
	c.cmd.Env = append(base, env...)
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start serve: %w", err)
	}
	if err := waitFor(ctx, 60*time.Second, "serve's /readyz", func() (bool, error) {
		resp, err := http.Get(c.url + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}); err != nil {
		return nil, fmt.Errorf("serve never became ready: %w\n%s", err, c.out.String())
	}
	return c, nil
}

func (c *serveChild) cpu() (cpuTimes, error) {
	var t cpuTimes
	var err error
	if t.mailroom, err = procCPUSeconds(c.cmd.Process.Pid); err != nil {
		return t, err
	}
	if c.redis != nil {
		t.redis, err = procCPUSeconds(c.redis.Process.Pid)
	}
	return t, err
}

func (c *serveChild) post(path string, body any) error {
	raw, _ := json.Marshal(body)
	req, err := http.NewRequest(http.MethodPost, c.url+path, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: %s", path, resp.Status)
	}
	return nil
}

// stop ends the serve with SIGTERM (a clean shutdown), then redis-server,
// and removes the data dir.
func (c *serveChild) stop() {
	if c.cmd != nil && c.cmd.Process != nil {
		_ = c.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = c.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = c.cmd.Process.Kill()
			<-done
		}
	}
	if c.redis != nil && c.redis.Process != nil {
		_ = c.redis.Process.Kill()
		_ = c.redis.Wait()
	}
	os.RemoveAll(c.dataDir)
}

// procCPUSeconds is a process's user plus system CPU time, from
// /proc/PID/stat (fields 14 and 15, in clock ticks of 1/100 s).
func procCPUSeconds(pid int) (float64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read CPU time (Linux /proc only): %w", err)
	}
	// The command name (field 2) may hold spaces: count from after it.
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseFloat(fields[11], 64)
	stime, err2 := strconv.ParseFloat(fields[12], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
	}
	return (utime + stime) / 100, nil
}

// procRSSMiB is a process's resident set size now (VmRSS).
func procRSSMiB(pid int) (float64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kib, err := strconv.ParseFloat(f[1], 64)
			return kib / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

func countLines(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
	}
	return n, sc.Err()
}

func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
