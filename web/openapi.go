package web

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/goccy/go-yaml"
)

// openAPIJSON turns the embedded YAML description into the JSON served at
// /api/v1/openapi.json (keys in the YAML's order). A document that does not
// parse stops start-up, as a template does.
func openAPIJSON(doc []byte) ([]byte, error) {
	raw, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, fmt.Errorf("web: assets/api/openapi.yaml: %w", err)
	}
	var probe struct {
		OpenAPI string `json:"openapi"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil || probe.OpenAPI == "" {
		return nil, fmt.Errorf("web: assets/api/openapi.yaml is not an OpenAPI document (%v)", err)
	}
	return raw, nil
}

// openAPIDoc is GET /api/v1/openapi.json: the OpenAPI 3.1 description of
// every /api/v1 route (no token needed).
func (s *server) openAPIDoc(c *gin.Context) {
	c.Header("Cache-Control", "no-cache")
	c.Data(http.StatusOK, "application/json; charset=utf-8", s.openAPI)
}
