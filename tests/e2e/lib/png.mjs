// Tiny deterministic RGB PNGs for the image tests and the demo (node's zlib only).
import zlib from 'node:zlib';

/** A w x h RGB PNG whose pixels depend on `seed`, as a Buffer. */
export function png(w, h, seed) {
  const row = 1 + 3 * w;
  const raw = Buffer.alloc(h * row);
  for (let y = 0; y < h; y++) {
    raw[y * row] = 0;  // filter: none
    for (let x = 0; x < 3 * w; x++) raw[y * row + 1 + x] = (x * seed + y * 7 + seed * 13) & 0xff;
  }
  return pngOf(w, h, raw);
}

/** A PNG whose header says w x h but whose pixel data is one row: what a size check that reads
 *  only the header must refuse without decoding (a real one would be as small, compressed). */
export function pngClaiming(w, h) {
  return pngOf(w, h, Buffer.alloc(1 + 3 * Math.min(w, 64)));
}

function pngOf(w, h, raw) {
  const chunk = (type, data) => {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(data.length);
    const td = Buffer.concat([Buffer.from(type, 'ascii'), data]);
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(zlib.crc32(td));
    return Buffer.concat([len, td, crc]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr.set([8, 2, 0, 0, 0], 8);  // 8 bits, RGB
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk('IHDR', ihdr),
    chunk('IDAT', zlib.deflateSync(raw)), chunk('IEND', Buffer.alloc(0))]);
}
