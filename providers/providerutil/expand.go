package providerutil

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// ExpandCommand replaces $(VAR) in each string with the variable's value from env, as the
// kubelet does for command and args; $$ is a literal $, unknown references stay.
func ExpandCommand(in []string, env []corev1.EnvVar) []string {
	if in == nil {
		return nil
	}
	vars := map[string]string{}
	for _, e := range env {
		vars[e.Name] = e.Value
	}
	out := make([]string, len(in))
	for i, s := range in {
		var b strings.Builder
		for j := 0; j < len(s); j++ {
			if s[j] == '$' && j+1 < len(s) {
				switch s[j+1] {
				case '$':
					b.WriteByte('$')
					j++
					continue
				case '(':
					if end := strings.IndexByte(s[j+2:], ')'); end >= 0 {
						name := s[j+2 : j+2+end]
						if v, ok := vars[name]; ok {
							b.WriteString(v)
						} else {
							b.WriteString(s[j : j+3+end])
						}
						j += 2 + end
						continue
					}
				}
			}
			b.WriteByte(s[j])
		}
		out[i] = b.String()
	}
	return out
}
