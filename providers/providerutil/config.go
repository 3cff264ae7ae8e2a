// Package providerutil holds helpers shared by the providers under providers/: the
// parts of reading a provider's configuration file that every provider does the same
// way. It knows nothing of the controllers.
package providerutil

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// Duration is a time.Duration written in JSON as a Go duration string ("3s", "1m30s").
type Duration struct{ time.Duration }

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a duration string such as "3s".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"3s\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// DecodeJSONFile reads one JSON object from path into v. Unknown fields and trailing
// data are errors, so that a typo in a configuration file does not silently leave a
// default in place.
func DecodeJSONFile(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: unexpected data after the JSON object", path)
	}
	return nil
}
