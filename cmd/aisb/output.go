package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"
)

// completionCommand prints a shell's completion script; the scripts ask aisb
// itself (--generate-bash-completion) for the words at each point.
func completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print the shell completion script for bash, zsh or fish",
		ArgsUsage: "bash|zsh|fish",
		Description: `EXAMPLE:
   source <(aisb completion bash)
   aisb completion zsh > "${fpath[1]}/_aisb"
   aisb completion fish > ~/.config/fish/completions/aisb.fish`,
		Action: func(c *cli.Context) error {
			switch shell := c.Args().First(); shell {
			case "bash":
				_, err := io.WriteString(c.App.Writer, bashCompletion)
				return err
			case "zsh":
				_, err := io.WriteString(c.App.Writer, zshCompletion)
				return err
			case "fish":
				s, err := c.App.ToFishCompletion()
				if err == nil {
					_, err = io.WriteString(c.App.Writer, s)
				}
				return err
			default:
				return exitWith(2, fmt.Errorf("completion: give bash, zsh or fish, not %q", shell))
			}
		},
	}
}

const bashCompletion = `# aisb bash completion
_aisb_complete() {
  local words
  words=$("${COMP_WORDS[0]}" "${COMP_WORDS[@]:1:$COMP_CWORD-1}" --generate-bash-completion 2>/dev/null)
  COMPREPLY=($(compgen -W "$words" -- "${COMP_WORDS[COMP_CWORD]}"))
}
complete -o default -F _aisb_complete aisb
`

const zshCompletion = `#compdef aisb
_aisb() {
  local -a opts
  opts=("${(@f)$(${words[1]} ${words[@]:1:$CURRENT-2} --generate-bash-completion 2>/dev/null)}")
  _describe 'aisb' opts
}
compdef _aisb aisb
`
