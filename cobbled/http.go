package cobbled

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// HealthHandler serves /healthz: 200 with the node's Stats as JSON while it
// is open, 503 once it is closing. A replica whose last batch failed is
// still healthy (it serves what it has); its error shows in the body. A
// replica fault (a corrupt batch refused, or corrupt own data being
// rebuilt) makes the status "degraded" and is listed in "faults".
func (n *Node) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if n.closed.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"status":"closing"}` + "\n"))
			return
		}
		st := n.Stats()
		body := struct {
			Status string   `json:"status"`
			ID     string   `json:"id"`
			Faults []string `json:"faults,omitempty"`
			Stats
		}{"ok", n.opts.ID, nil, st}
		for _, h := range st.Held {
			if h.Fault != "" {
				body.Faults = append(body.Faults, fmt.Sprintf("partition %d: %s", h.Partition, h.Fault))
			}
		}
		if len(body.Faults) > 0 {
			// Still 200: the node serves (a refused batch leaves the previous
			// data serving; a corrupt partition is served by other replicas).
			body.Status = "degraded"
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(body)
	})
}
