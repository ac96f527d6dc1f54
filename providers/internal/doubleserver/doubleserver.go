// Package doubleserver serves a provider test double's handler on a local
// listener, the same way for every double.
package doubleserver

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"time"
)

// Server is a running double's HTTP server.
type Server struct {
	ln     net.Listener
	srv    *http.Server
	served chan struct{}
	once   sync.Once
	err    error
}

// Start listens on addr ("" means a free loopback port) and serves h in a
// goroutine until Close. name prefixes errors ("stripedouble").
func Start(name, addr string, h http.Handler) (*Server, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: listen on %s: %w", name, addr, err)
	}
	s := &Server{
		ln: ln,
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 10 * time.Second,
			// Dropped connections and aborted handlers are deliberate in a
			// double that injects faults.
			ErrorLog: log.New(io.Discard, "", 0),
		},
		served: make(chan struct{}),
	}
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// URL is the server's base URL, "http://127.0.0.1:PORT".
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() }

// Close stops the server, dropping open connections, and waits until it no
// longer serves. It is safe to call more than once.
func (s *Server) Close() error {
	s.once.Do(func() {
		s.err = s.srv.Close()
		<-s.served
	})
	return s.err
}
