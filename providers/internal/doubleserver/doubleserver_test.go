package doubleserver

import (
	"net/http"
	"testing"
)

func TestStartServesUntilClose(t *testing.T) {
	t.Parallel()
	s, err := Start("test", "", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTeapot {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_ = s.Close() // twice is fine
	if _, err := http.Get(s.URL()); err == nil {
		t.Fatal("still serving after Close")
	}
	if _, err := Start("test", "not an address", nil); err == nil {
		t.Fatal("bad address accepted")
	}
}
