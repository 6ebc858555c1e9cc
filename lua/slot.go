package lua

import "strings"

// HashTag returns the part of key that Redis Cluster hashes: the text between the
// first '{' and the next '}', when that text is not empty; else the whole key.
func HashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return key
	}
	return key[open+1 : open+1+end]
}

// Slot is the Redis Cluster hash slot of key (CRC16/XMODEM of its hash tag mod 16384).
func Slot(key string) int {
	return int(crc16(HashTag(key)) % 16384)
}

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
