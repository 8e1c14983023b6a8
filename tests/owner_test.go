package tests

import (
	"os"
	"os/user"
	"strconv"
	"syscall"
)

func fileOwner(fi os.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "?"
	}
	u, err := user.LookupId(itoa(int(st.Uid)))
	if err != nil {
		return itoa(int(st.Uid))
	}
	return u.Username
}

func itoa(n int) string {
	return strconv.Itoa(n)
}
