//! HTTP/2 frames (RFC 9113 §4, §6): the 9-byte frame header, each frame
//! type's payload checked and parsed, and the frames a server writes.
