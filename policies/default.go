package policies

import _ "embed"

// DefaultFile is the policy that `parley-keyd init` writes: safe without
// editing (every request asks in the terminal, grants live at most an hour
// and allow no money, consent always asks), with commented examples of the
// common shapes.
//
//go:embed default.toml
var DefaultFile []byte

// DefaultText returns DefaultFile as a string.
func DefaultText() string { return string(DefaultFile) }
