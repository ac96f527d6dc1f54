// Package resetserver is a test server that reads a request's whole body,
// counts it as delivered, and then, for the deliveries its Config says,
// drops the request without an answer instead of answering 202 Accepted:
// over HTTP/2 with an RST_STREAM (REFUSED_STREAM) or a GOAWAY, over
// HTTP/1.1 by resetting the connection. A client that sends the same request
// again after such a reset shows up as a second delivery.
//
// It speaks TLS with a certificate of its own (trust it through
// ClientTLSConfig) and offers both "h2" and "http/1.1" by ALPN, so the
// client decides which protocol is used. It is written with
// golang.org/x/net/http2's Framer and hpack rather than net/http's server so
// that it can reset a stream after reading its body.
package resetserver

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Mode is how a delivery is dropped.
type Mode int

const (
	// RefusedStream answers the stream with RST_STREAM(REFUSED_STREAM), the
	// code by which a server says it did not process the stream (here, a
	// lie). Over HTTP/1.1 the connection is reset.
	RefusedStream Mode = iota + 1
	// GoAway sends GOAWAY with last stream id 0 (none processed, again a
	// lie) and stops reading the connection. Over HTTP/1.1 the connection
	// is reset.
	GoAway
)

// Config configures a Server.
type Config struct {
	// Mode is how a dropped delivery is dropped. Required.
	Mode Mode
	// Drop reports whether the n-th delivery (1-based, counted over all
	// connections) is dropped rather than answered. Nil drops the first
	// delivery only.
	Drop func(n int) bool
	// ConnTimeout bounds each connection's life. Defaults to 30s.
	ConnTimeout time.Duration
}

// Delivery is one request body the server read in full.
type Delivery struct {
	// Proto is "HTTP/2.0" or "HTTP/1.1".
	Proto string
	// Method and Path are the request's; Path is without the query.
	Method, Path string
	// Body is the whole request body.
	Body []byte
	// Dropped tells whether the delivery was dropped instead of answered.
	Dropped bool
}

// Server is a running reset server. Close it when done.
type Server struct {
	cfg    Config
	ln     net.Listener
	tlsCfg *tls.Config
	roots  *x509.CertPool

	wg sync.WaitGroup

	mu         sync.Mutex
	conns      map[net.Conn]struct{}
	deliveries []Delivery
	changed    chan struct{} // closed and replaced on every delivery
	closed     bool
}

// Start starts a server on 127.0.0.1.
func Start(cfg Config) (*Server, error) {
	if cfg.Mode != RefusedStream && cfg.Mode != GoAway {
		return nil, errors.New("resetserver: Config.Mode is required")
	}
	if cfg.Drop == nil {
		cfg.Drop = func(n int) bool { return n == 1 }
	}
	if cfg.ConnTimeout == 0 {
		cfg.ConnTimeout = 30 * time.Second
	}
	cert, roots, err := selfSigned()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:     cfg,
		ln:      ln,
		roots:   roots,
		tlsCfg:  &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12},
		conns:   map[net.Conn]struct{}{},
		changed: make(chan struct{}),
	}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// URL is the server's base URL, "https://127.0.0.1:PORT".
func (s *Server) URL() string { return "https://" + s.ln.Addr().String() }

// ClientTLSConfig returns a client TLS configuration that trusts the
// server's certificate.
func (s *Server) ClientTLSConfig() *tls.Config {
	return &tls.Config{RootCAs: s.roots, MinVersion: tls.VersionTLS12}
}

// Deliveries returns the request bodies read so far, in order.
func (s *Server) Deliveries() []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Delivery(nil), s.deliveries...)
}

// WaitDeliveries waits until at least n deliveries were read, or ctx ends.
func (s *Server) WaitDeliveries(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		got, ch := len(s.deliveries), s.changed
		s.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("resetserver: %d deliveries, waiting for %d: %w", got, n, ctx.Err())
		}
	}
}

// Close stops the server, closes its connections and waits for its
// goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	err := s.ln.Close()
	s.wg.Wait()
	return err
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				_ = c.Close()
			}()
			s.serve(c)
		}()
	}
}

// record counts a delivery and reports whether it is to be dropped.
func (s *Server) record(d Delivery) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	d.Dropped = s.cfg.Drop(len(s.deliveries) + 1)
	s.deliveries = append(s.deliveries, d)
	close(s.changed)
	s.changed = make(chan struct{})
	return d.Dropped
}

func (s *Server) messageID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return "msg-" + strconv.Itoa(len(s.deliveries))
}

func (s *Server) serve(raw net.Conn) {
	_ = raw.SetDeadline(time.Now().Add(s.cfg.ConnTimeout))
	c := tls.Server(raw, s.tlsCfg)
	if err := c.Handshake(); err != nil {
		return
	}
	if c.ConnectionState().NegotiatedProtocol == "h2" {
		s.serveH2(c)
		return
	}
	s.serveH1(c, raw)
}

// serveH1 answers HTTP/1.1 requests on one connection until a dropped
// delivery, which resets the connection.
func (s *Server) serveH1(c *tls.Conn, raw net.Conn) {
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return
		}
		if s.record(Delivery{Proto: "HTTP/1.1", Method: req.Method, Path: req.URL.Path, Body: body}) {
			// An RST rather than a FIN, so the client sees a lost
			// connection, not a clean close.
			if tcp, ok := raw.(*net.TCPConn); ok {
				_ = tcp.SetLinger(0)
			}
			return
		}
		resp := "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\nX-Message-Id: " + s.messageID() + "\r\n\r\n"
		if _, err := io.WriteString(c, resp); err != nil {
			return
		}
	}
}

// serveH2 speaks just enough HTTP/2 for one client connection: it acks
// SETTINGS and PINGs, collects each stream's headers and body, and answers
// or drops the stream once its body ended.
func (s *Server) serveH2(c *tls.Conn) {
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		return
	}
	h := &h2Conn{s: s, fr: fr, streams: map[uint32]*h2Stream{}}
	for {
		f, err := fr.ReadFrame()
		if err != nil || !h.handle(f) {
			return
		}
	}
}

// h2Conn is one HTTP/2 connection serveH2 serves.
type h2Conn struct {
	s       *Server
	fr      *http2.Framer
	streams map[uint32]*h2Stream // by stream id, until the request ends
}

// h2Stream is a request being read.
type h2Stream struct {
	method, path string
	body         bytes.Buffer
}

// handle handles one frame; false stops the connection.
func (h *h2Conn) handle(f http2.Frame) bool {
	switch f := f.(type) {
	case *http2.SettingsFrame:
		return f.IsAck() || h.fr.WriteSettingsAck() == nil
	case *http2.PingFrame:
		return f.IsAck() || h.fr.WritePing(true, f.Data) == nil
	case *http2.MetaHeadersFrame:
		id := f.Header().StreamID
		path, _, _ := strings.Cut(f.PseudoValue("path"), "?")
		h.streams[id] = &h2Stream{method: f.PseudoValue("method"), path: path}
		return !f.StreamEnded() || h.end(id)
	case *http2.DataFrame:
		return h.data(f)
	case *http2.GoAwayFrame:
		return false
	}
	return true
}

// data adds a DATA frame to its stream's body.
func (h *h2Conn) data(f *http2.DataFrame) bool {
	id := f.Header().StreamID
	if st := h.streams[id]; st != nil {
		st.body.Write(f.Data())
	}
	// Give the flow-control window back, so bodies of any size arrive.
	if n := uint32(len(f.Data())); n > 0 {
		if h.fr.WriteWindowUpdate(0, n) != nil || h.fr.WriteWindowUpdate(id, n) != nil {
			return false
		}
	}
	return !f.StreamEnded() || h.end(id)
}

// end handles a stream whose request ended: it records the delivery, then
// answers it 202 or drops it as Config.Mode says; false stops the
// connection.
func (h *h2Conn) end(id uint32) bool {
	st := h.streams[id]
	delete(h.streams, id)
	if st == nil {
		return true
	}
	d := Delivery{Proto: "HTTP/2.0", Method: st.method, Path: st.path, Body: bytes.Clone(st.body.Bytes())}
	if !h.s.record(d) {
		var block bytes.Buffer
		enc := hpack.NewEncoder(&block)
		_ = enc.WriteField(hpack.HeaderField{Name: ":status", Value: "202"})
		_ = enc.WriteField(hpack.HeaderField{Name: "x-message-id", Value: h.s.messageID()})
		return h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true}) == nil
	}
	switch h.s.cfg.Mode {
	case RefusedStream:
		return h.fr.WriteRSTStream(id, http2.ErrCodeRefusedStream) == nil
	default: // GoAway
		_ = h.fr.WriteGoAway(0, http2.ErrCodeNo, nil)
		// Keep the connection open (the client closes it): closing at
		// once could race the client's reading of the GOAWAY.
		return true
	}
}

// selfSigned makes a certificate for 127.0.0.1 and a pool that trusts it.
func selfSigned() (tls.Certificate, *x509.CertPool, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "resetserver"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, roots, nil
}
