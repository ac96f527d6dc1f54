package adminhttp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Server serves a Handler on an address of its own: `outboxd run`'s admin
// server. Create it with New, then Start it; stop it with Shutdown.
type Server struct {
	handler  *Handler
	http     *http.Server
	mu       sync.Mutex
	listener net.Listener
	stopUI   context.CancelFunc
	served   chan error

	shutdownOnce sync.Once
	shutdownErr  error
}

// New validates cfg, with Addr defaulting to DefaultAddr, and builds the
// server and its Handler without listening yet. Its errors are
// *ConfigError naming the field.
func New(cfg Config) (*Server, error) {
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	h, err := NewHandler(cfg)
	if err != nil {
		return nil, err
	}
	return &Server{handler: h, http: &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(h.cfg.Logger.Handler(), slog.LevelWarn),
	}}, nil
}

// Handler returns the handler the server serves.
func (s *Server) Handler() *Handler { return s.handler }

// Start listens on Config.Addr, starts the Handler, and serves in the
// background until Shutdown. It returns once the listener is open, so a
// port in use is reported here. ctx bounds only starting.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener != nil {
		return errors.New("adminhttp: already started")
	}
	addr := s.handler.cfg.Addr
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("adminhttp: listen on %s: %w", addr, err)
	}
	// The handler's background work (River's UI) lasts until Shutdown,
	// not until ctx is done.
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	if err := s.handler.Start(runCtx); err != nil {
		stop()
		ln.Close()
		return err
	}
	s.stopUI = stop
	s.listener = ln
	s.served = make(chan error, 1)
	go func() {
		err := s.http.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.served <- err
	}()
	s.handler.cfg.Logger.InfoContext(ctx, "admin server listening", "addr", ln.Addr().String(), "token_required", s.handler.keys.tokenSet)
	return nil
}

// Addr returns the address the server listens on once started ("" before),
// with the real port when Config.Addr asked for port 0.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener == nil {
		return ""
	}
	return s.listener.Addr().String()
}

// Shutdown stops accepting connections and waits, until ctx is done, for
// requests in flight to finish; then it closes the rest. It is a no-op on
// a server that was never started; later calls return the first's result.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	started := s.listener != nil
	stopUI := s.stopUI
	s.mu.Unlock()
	if !started {
		return nil
	}
	s.shutdownOnce.Do(func() {
		defer stopUI()
		err := s.http.Shutdown(ctx)
		if err != nil {
			s.http.Close()
		}
		if serveErr := <-s.served; serveErr != nil && err == nil {
			err = serveErr
		}
		s.shutdownErr = err
	})
	return s.shutdownErr
}
