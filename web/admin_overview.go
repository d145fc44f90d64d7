package web

import (
	"errors"
	"html/template"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"mailroom/queue"
	"mailroom/store"
)

// queueStats is every queue of the table with live counts; none when the
// queue is not wired.
func (s *server) queueStats(c *gin.Context) ([]queue.QueueStats, error) {
	if s.deps.Queue == nil {
		return []queue.QueueStats{}, nil
	}
	ctx, cancel := s.ctx(c, 5*time.Second)
	defer cancel()
	stats, err := s.deps.Queue.Stats(ctx)
	if err != nil && (stats == nil || !errors.Is(err, queue.ErrBrokerUnavailable)) {
		return nil, err
	}
	if stats == nil {
		stats = []queue.QueueStats{}
	}
	return stats, err
}

// queueRow is one queue on the overview (the page and its JSON refresh).
type queueRow struct {
	queue.QueueStats
	Status        string        `json:"status"`
	StatusClass   string        `json:"statusClass"`
	Spark         template.HTML `json:"spark"`
	HourProcessed int           `json:"hourProcessed"`
	HourFailed    int           `json:"hourFailed"`
	P50           string        `json:"p50"`
	P99           string        `json:"p99"`
	DeadLink      string        `json:"deadLink"`
}

type queueTotals struct {
	Pending      int   `json:"pending"`
	Active       int   `json:"active"`
	Scheduled    int   `json:"scheduled"`
	Retry        int   `json:"retry"`
	Processed    int64 `json:"processed"`
	Failed       int64 `json:"failed"`
	DeadLettered int   `json:"deadLettered"`
	Workers      int   `json:"workers"`
}

// Problem is something that keeps the appliance from working now, shown
// at the top of the overview.
type Problem struct {
	Title string `json:"title"`
	Text  string `json:"text"`
}

type dataFileView struct {
	Size int64 `json:"size"`
	Free int64 `json:"free"`
}

type overviewView struct {
	// Panels are figures of the pipelines (the Gmail quota; page only,
	// not refreshed).
	Panels []overviewPanel `json:"-"`
	// Events are the newest events of the log (page only).
	Events   []store.Event `json:"-"`
	Running  bool          `json:"running"`
	Problems []Problem     `json:"problems"`
	Queues   []queueRow    `json:"queues"`
	Totals   queueTotals   `json:"totals"`
	// DataFile is the bbolt file's size and the part of it free for reuse
	// (mailroom compact gives it back), in bytes.
	DataFile  dataFileView `json:"dataFile"`
	UpdatedAt time.Time    `json:"updatedAt"`
}

func (s *server) overview(c *gin.Context) (overviewView, error) {
	stats, err := s.queueStats(c)
	brokerDown := errors.Is(err, queue.ErrBrokerUnavailable)
	if err != nil && !brokerDown {
		return overviewView{}, err
	}
	now := s.now()
	v := overviewView{Running: s.deps.Queue != nil, Problems: []Problem{}, Queues: make([]queueRow, 0, len(stats)), UpdatedAt: now.UTC()}
	if s.deps.Problems != nil {
		v.Problems = append(v.Problems, s.deps.Problems()...)
	}
	fs := s.deps.DB.FileStats()
	v.DataFile = dataFileView{Size: fs.Size, Free: fs.Free}
	if brokerDown && len(v.Problems) == 0 {
		v.Problems = append(v.Problems, Problem{Title: "The task broker does not answer.", Text: "Counts below are from the outbox only; accepted work is kept and resumes when the broker returns."})
	}
	for _, st := range stats {
		row := queueRow{QueueStats: st, DeadLink: "/admin/deadletters"}
		if len(st.Types) == 1 {
			row.DeadLink += "?type=" + st.Types[0]
		}
		row.Status, row.StatusClass = queueStatus(st)
		points := s.deps.Queue.History(st.Name, now)
		ok, failed := make([]int, len(points)), make([]int, len(points))
		for i, p := range points {
			ok[i], failed[i] = p.Processed, p.Failed
			row.HourProcessed += p.Processed
			row.HourFailed += p.Failed
		}
		// Latency of the latest minute with work; the values are the upper
		// bounds of histogram buckets, hence "≤".
		for i := len(points) - 1; i >= 0; i-- {
			if points[i].Processed+points[i].Failed > 0 {
				row.P50, row.P99 = "≤"+humanDuration(points[i].P50), "≤"+humanDuration(points[i].P99)
				break
			}
		}
		if row.P50 == "" {
			row.P50, row.P99 = "—", "—"
		}
		row.Spark = sparkline(ok, failed)
		v.Queues = append(v.Queues, row)

		t := &v.Totals
		t.Pending += st.Pending
		t.Active += st.Active
		t.Scheduled += st.Scheduled
		t.Retry += st.Retry
		t.Processed += st.Processed
		t.Failed += st.Failed
		t.DeadLettered += st.DeadLettered
		t.Workers += st.Concurrency
	}
	return v, nil
}

func queueStatus(st queue.QueueStats) (label, class string) {
	switch {
	case st.DeadLettered > 0:
		return "dead letters", "err"
	case st.Retry > 0:
		return "retrying", "warn"
	case st.Active > 0:
		return "working", "info"
	case st.Pending > 0 || st.Scheduled > 0:
		return "queued", "info"
	}
	return "idle", "muted"
}

// overviewEvents is how many of the newest events the overview shows.
const overviewEvents = 10

func (s *server) overviewPage(c *gin.Context) {
	v, err := s.overview(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	if s.deps.Gmail != nil {
		ctx, cancel := s.ctx(c, 5*time.Second)
		p, err := gmailOverview(ctx, s.deps.Gmail)
		cancel()
		if err != nil {
			s.fail(c, err)
			return
		}
		if len(p.Figures) > 0 {
			v.Panels = append(v.Panels, p)
		}
	}
	if s.deps.Fleet != nil {
		ctx, cancel := s.ctx(c, 5*time.Second)
		f, err := s.deps.Fleet(ctx)
		cancel()
		if err != nil {
			s.fail(c, err)
			return
		}
		v.Panels = append(v.Panels, fleetOverview(f))
	}
	if err := s.deps.DB.View(func(tx *store.Tx) (err error) { v.Events, err = tx.EventsLatest(overviewEvents); return err }); err != nil {
		s.fail(c, err)
		return
	}
	s.render(c, http.StatusOK, "overview", v)
}

func (s *server) overviewJSON(c *gin.Context) {
	v, err := s.overview(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	c.Header("Cache-Control", "no-store")
	s.writeJSON(c, http.StatusOK, v)
}
