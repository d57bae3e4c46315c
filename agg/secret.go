package agg

import (
	"encoding/hex"
	"fmt"
	"os"
	"strings"
)

// MinSecretLen is the shortest secret, in bytes, that the daemon accepts
// (as BRAID_SECRET's).
const MinSecretLen = 16

// ParseSecret decodes a hex secret of at least MinSecretLen bytes.
func ParseSecret(s string) ([]byte, error) {
	b, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("a secret is hex: %v", err)
	}
	if len(b) < MinSecretLen {
		return nil, fmt.Errorf("a secret of %d bytes: it needs at least %d (%d hex digits)", len(b), MinSecretLen, 2*MinSecretLen)
	}
	return b, nil
}

// ReadSecretFile reads a file of hex secrets, one a line; blank lines and
// lines that start with # are skipped.
func ReadSecretFile(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s, err := ParseSecret(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, i+1, err)
		}
		out = append(out, s)
	}
	return out, nil
}
