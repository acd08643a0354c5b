package cobbled

import (
	"encoding/json"
	"net/http"
)

// HealthHandler serves /healthz: 200 with the node's Stats as JSON while it
// is open, 503 once it is closing. A replica whose last batch failed is
// still healthy (it serves what it has); its error shows in the body.
func (n *Node) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if n.closed.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"status":"closing"}` + "\n"))
			return
		}
		body := struct {
			Status string `json:"status"`
			ID     string `json:"id"`
			Stats
		}{"ok", n.opts.ID, n.Stats()}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(body)
	})
}
