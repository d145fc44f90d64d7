package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"mailroom/internal/lifecycle"
)

// httpShutdownTimeout bounds the wait for requests in flight at Stop.
const httpShutdownTimeout = 10 * time.Second

// httpService serves the app's handler on its address: the last service
// to start, the first to stop.
type httpService struct {
	lifecycle.Base
	addr    string
	handler http.Handler
	log     *slog.Logger

	server   *http.Server
	listener net.Listener
}

var _ lifecycle.Service = (*httpService)(nil)

func newHTTPService(addr string, h http.Handler, log *slog.Logger) *httpService {
	return &httpService{addr: addr, handler: h, log: log}
}

// Start listens on the address and serves until Stop.
func (s *httpService) Start(ctx context.Context) error {
	r, ok := s.Begin(ctx)
	if !ok {
		return nil // running already
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		_ = s.Ending().End(ctx) // nothing runs yet
		return fmt.Errorf("listen on --http-addr %s: %w", s.addr, err)
	}
	s.listener = ln
	s.server = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	srv := s.server
	r.Go(func(context.Context) {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http server", "err", err)
		}
	})
	return nil
}

// Addr is the address HTTP listens on (useful with port 0), or the
// configured one before Start.
func (s *httpService) Addr() string {
	if s.listener == nil {
		return s.addr
	}
	return s.listener.Addr().String()
}

// Stop shuts the server down gracefully (requests in flight get
// httpShutdownTimeout) and waits for it.
func (s *httpService) Stop(ctx context.Context) error {
	r := s.Ending()
	if r == nil {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, httpShutdownTimeout)
	defer cancel()
	var errs []error
	if err := s.server.Shutdown(sctx); err != nil {
		errs = append(errs, fmt.Errorf("http shutdown: %w", err))
	}
	errs = append(errs, r.End(ctx))
	return errors.Join(errs...)
}
