package metrics

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestRequireToken: an endpoint with a token answers only requests that
// carry it, as a bearer token or a query parameter.
func TestRequireToken(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	const token = "0123456789abcdef"
	h := RequireToken(ok, token)
	for _, c := range []struct {
		name, url, auth string
		want            int
	}{
		{"none", "/metrics", "", http.StatusUnauthorized},
		{"wrong bearer", "/metrics", "Bearer 0123456789abcdeX", http.StatusUnauthorized},
		{"wrong query", "/metrics?token=nope", "", http.StatusUnauthorized},
		{"bearer", "/metrics", "Bearer " + token, http.StatusTeapot},
		{"query", "/metrics?token=" + token, "", http.StatusTeapot},
	} {
		r := httptest.NewRequest("GET", c.url, nil)
		if c.auth != "" {
			r.Header.Set("Authorization", c.auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("%s: %d, want %d", c.name, w.Code, c.want)
		}
	}
	if RequireToken(ok, "") == nil {
		t.Fatal("no handler without a token")
	}
	w := httptest.NewRecorder()
	RequireToken(ok, "").ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if w.Code != http.StatusTeapot {
		t.Errorf("without a token configured: %d", w.Code)
	}
}
