package main

import (
	"strconv"
	"syscall"
)

// fsType names the file system of dir as statfs reports it: "tmpfs",
// "ext4" (which covers ext2/3/4), "xfs", "btrfs", "overlay", or its magic
// number in hex; "" if it cannot be read.
func fsType(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return ""
	}
	t := uint32(st.Type)
	switch t {
	case 0x01021994:
		return "tmpfs"
	case 0xef53:
		return "ext4"
	case 0x58465342:
		return "xfs"
	case 0x9123683e:
		return "btrfs"
	case 0x794c7630:
		return "overlay"
	}
	return "0x" + strconv.FormatUint(uint64(t), 16)
}
