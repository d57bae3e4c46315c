//go:build !unix

package gpu

import "errors"

var errNoShm = errors.New("gpu: shared-memory mailboxes need a Unix system")

func createShared(size int) (string, []byte, error) { return "", nil, errNoShm }

func openShared(path string, size, alt int) ([]byte, error) { return nil, errNoShm }

func unmapShared(mem []byte) error { return nil }
