package adminhttp_test

// A minimal headless-Chromium driver for the browser test: it starts
// Debian's chromium with the DevTools protocol on a loopback port and
// speaks to one page over a small hand-written WebSocket client (RFC 6455,
// client side: masked text frames out, unmasked frames in), so the test
// needs no dependency beyond the standard library.

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// findChromium returns the chromium binary, or skips the test when there is
// none outside CI (in CI, CI=true, a missing browser fails the test).
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed, and CI=true: install it (apt-get install chromium); .ci/run does")
	}
	t.Skip("chromium is not installed (apt-get install chromium); skipped outside CI")
	return ""
}

// browser is one headless Chromium page driven over the DevTools protocol.
type browser struct {
	t      *testing.T
	ws     *wsConn
	mu     sync.Mutex
	nextID int
}

var devtoolsLine = regexp.MustCompile(`DevTools listening on (ws://\S+)`)

// startBrowser starts chromium and connects to its first page. Everything
// is stopped when the test ends.
func startBrowser(t *testing.T) *browser {
	t.Helper()
	bin := findChromium(t)
	// The profile is removed by hand: chromium's helper processes may
	// still be writing to it for a moment after they are killed.
	profile, err := os.MkdirTemp("", "outboxd-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--no-first-run", "--no-default-browser-check",
		"--user-data-dir="+profile, "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
		"--window-size=1280,900", "about:blank")
	// Its own process group, so its helper processes end with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := os.RemoveAll(profile)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Logf("remove chromium profile %s: %v", profile, err)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	found := make(chan string, 1)
	var logMu sync.Mutex
	var log strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			logMu.Lock()
			log.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if m := devtoolsLine.FindStringSubmatch(sc.Text()); m != nil && !sent {
				found <- m[1]
				sent = true
			}
		}
	}()
	var browserURL string
	select {
	case browserURL = <-found:
	case <-time.After(60 * time.Second):
		logMu.Lock()
		defer logMu.Unlock()
		t.Fatalf("chromium did not open its DevTools port within 60s; stderr:\n%s", log.String())
	}
	u, err := url.Parse(browserURL)
	if err != nil {
		t.Fatal(err)
	}

	// The page targets are listed over plain HTTP on the same port.
	var pageURL string
	deadline := time.Now().Add(30 * time.Second)
	for pageURL == "" {
		resp, err := http.Get("http://" + u.Host + "/json/list")
		if err == nil {
			var targets []struct{ Type, WebSocketDebuggerURL string }
			err = json.NewDecoder(resp.Body).Decode(&targets)
			resp.Body.Close()
			for _, tg := range targets {
				if tg.Type == "page" && tg.WebSocketDebuggerURL != "" {
					pageURL = tg.WebSocketDebuggerURL
					break
				}
			}
		}
		if pageURL == "" {
			if time.Now().After(deadline) {
				t.Fatalf("chromium lists no page target (last error %v)", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	ws, err := dialWS(context.Background(), pageURL)
	if err != nil {
		t.Fatalf("connect to the page: %v", err)
	}
	t.Cleanup(func() { ws.conn.Close() })
	b := &browser{t: t, ws: ws}
	b.call("Emulation.setDeviceMetricsOverride", map[string]any{"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": false}, nil)
	return b
}

// call sends one DevTools command and decodes its result into result.
func (b *browser) call(method string, params, result any) {
	b.t.Helper()
	if err := b.tryCall(method, params, result); err != nil {
		b.t.Fatalf("%s: %v", method, err)
	}
}

func (b *browser) tryCall(method string, params, result any) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nextID++
	id := b.nextID
	msg, err := json.Marshal(map[string]any{"id": id, "method": method, "params": params})
	if err != nil {
		return err
	}
	if err := b.ws.conn.SetDeadline(time.Now().Add(60 * time.Second)); err != nil {
		return err
	}
	if err := b.ws.writeText(msg); err != nil {
		return err
	}
	for {
		data, err := b.ws.readMessage()
		if err != nil {
			return err
		}
		var reply struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(data, &reply); err != nil {
			return fmt.Errorf("reply is not JSON: %w", err)
		}
		if reply.ID != id {
			continue // an event, or a reply to nothing we wait for
		}
		if reply.Error != nil {
			return fmt.Errorf("DevTools error %d: %s", reply.Error.Code, reply.Error.Message)
		}
		if result != nil {
			return json.Unmarshal(reply.Result, result)
		}
		return nil
	}
}

// eval evaluates a JavaScript expression in the page and decodes its value
// into out (which may be nil).
func (b *browser) eval(expr string, out any) {
	b.t.Helper()
	var res struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	b.call("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &res)
	if res.ExceptionDetails != nil {
		b.t.Fatalf("evaluate %q: %s %s", expr, res.ExceptionDetails.Text, res.ExceptionDetails.Exception.Description)
	}
	if out != nil && len(res.Result.Value) > 0 {
		if err := json.Unmarshal(res.Result.Value, out); err != nil {
			b.t.Fatalf("evaluate %q: value %s: %v", expr, res.Result.Value, err)
		}
	}
}

// act runs script, which navigates (a form submission, a click on a link),
// and waits until the next page has loaded. It marks the current document
// first, so a page that has not yet been replaced is never mistaken for
// the new one.
func (b *browser) act(script string) {
	b.t.Helper()
	b.eval(`window.__outboxdOld = true`, nil)
	b.eval(script, nil)
	b.waitLoaded()
}

// navigate opens url and waits for it to load.
func (b *browser) navigate(u string) {
	b.t.Helper()
	b.eval(`window.__outboxdOld = true`, nil)
	b.call("Page.navigate", map[string]any{"url": u}, nil)
	b.waitLoaded()
}

func (b *browser) waitLoaded() {
	b.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var loaded bool
		// Evaluating during a navigation may fail (the context is gone);
		// that only means "not yet".
		var res struct {
			Result struct {
				Value bool `json:"value"`
			} `json:"result"`
		}
		err := b.tryCall("Runtime.evaluate", map[string]any{
			"expression":    `window.__outboxdOld === undefined && document.readyState === "complete"`,
			"returnByValue": true,
		}, &res)
		loaded = err == nil && res.Result.Value
		if loaded {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("page did not load within 60s (last error %v)", err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// location returns the page's path and query.
func (b *browser) location() string {
	var loc string
	b.eval(`location.pathname + location.search`, &loc)
	return loc
}

// text returns the text of the first element matching selector, or "".
func (b *browser) text(selector string) string {
	var s string
	b.eval(fmt.Sprintf(`(document.querySelector(%q) || {innerText: ""}).innerText`, selector), &s)
	return s
}

// count returns how many elements match selector.
func (b *browser) count(selector string) int {
	b.t.Helper()
	var n int
	b.eval(fmt.Sprintf(`document.querySelectorAll(%q).length`, selector), &n)
	return n
}

// screenshot saves the page as PNG.
func (b *browser) screenshot(path string) {
	b.t.Helper()
	var res struct {
		Data string `json:"data"`
	}
	b.call("Page.captureScreenshot", map[string]any{"format": "png"}, &res)
	png, err := base64.StdEncoding.DecodeString(res.Data)
	if err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// wsConn is the client side of one WebSocket connection.
type wsConn struct {
	conn net.Conn
	br   *bufio.Reader
}

const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

func dialWS(ctx context.Context, rawURL string) (*wsConn, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		conn.Close()
		return nil, err
	}
	key := base64.StdEncoding.EncodeToString(nonce)
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", u.RequestURI(), u.Host, key); err != nil {
		conn.Close()
		return nil, err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		conn.Close()
		return nil, err
	}
	sum := sha1.Sum([]byte(key + wsGUID))
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != base64.StdEncoding.EncodeToString(sum[:]) {
		conn.Close()
		return nil, fmt.Errorf("websocket handshake refused: %s", resp.Status)
	}
	return &wsConn{conn: conn, br: br}, nil
}

// writeFrame writes one final, masked frame.
func (c *wsConn) writeFrame(opcode byte, payload []byte) error {
	header := []byte{0x80 | opcode}
	switch n := len(payload); {
	case n < 126:
		header = append(header, 0x80|byte(n))
	case n <= 0xFFFF:
		header = append(header, 0x80|126, byte(n>>8), byte(n))
	default:
		header = append(header, 0x80|127)
		header = binary.BigEndian.AppendUint64(header, uint64(n))
	}
	mask := make([]byte, 4)
	if _, err := rand.Read(mask); err != nil {
		return err
	}
	header = append(header, mask...)
	masked := make([]byte, len(payload))
	for i, b := range payload {
		masked[i] = b ^ mask[i%4]
	}
	_, err := c.conn.Write(append(header, masked...))
	return err
}

func (c *wsConn) writeText(p []byte) error { return c.writeFrame(0x1, p) }

// readMessage returns the next whole text or binary message, answering
// pings on the way.
func (c *wsConn) readMessage() ([]byte, error) {
	var msg []byte
	for {
		var h [2]byte
		if _, err := io.ReadFull(c.br, h[:]); err != nil {
			return nil, err
		}
		fin, opcode := h[0]&0x80 != 0, h[0]&0x0F
		n := uint64(h[1] & 0x7F)
		switch n {
		case 126:
			var ext [2]byte
			if _, err := io.ReadFull(c.br, ext[:]); err != nil {
				return nil, err
			}
			n = uint64(binary.BigEndian.Uint16(ext[:]))
		case 127:
			var ext [8]byte
			if _, err := io.ReadFull(c.br, ext[:]); err != nil {
				return nil, err
			}
			n = binary.BigEndian.Uint64(ext[:])
		}
		var mask []byte
		if h[1]&0x80 != 0 {
			mask = make([]byte, 4)
			if _, err := io.ReadFull(c.br, mask); err != nil {
				return nil, err
			}
		}
		if n > 64<<20 {
			return nil, fmt.Errorf("websocket frame of %d bytes", n)
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(c.br, payload); err != nil {
			return nil, err
		}
		if mask != nil {
			for i := range payload {
				payload[i] ^= mask[i%4]
			}
		}
		switch opcode {
		case 0x8:
			return nil, errors.New("websocket closed by the browser")
		case 0x9:
			if err := c.writeFrame(0xA, payload); err != nil {
				return nil, err
			}
			continue
		case 0xA:
			continue
		case 0x0, 0x1, 0x2:
			msg = append(msg, payload...)
			if fin {
				return msg, nil
			}
		default:
			return nil, fmt.Errorf("unexpected websocket opcode %d", opcode)
		}
	}
}
