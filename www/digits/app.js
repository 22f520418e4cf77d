// Reduces a drawing to the model's input the way the UCI optdigits data was made: the ink's
// bounding box scaled (aspect kept, centred) into 32x32 on/off pixels, then the "on" pixels
// counted in each 4x4 block, giving 8x8 values 0..16 (scaled here to 0..1 as in training).
export function toDigitInput(canvas) {
  const { width, height } = canvas;
  const px = canvas.getContext("2d").getImageData(0, 0, width, height).data;
  let [x0, y0, x1, y1] = [width, height, -1, -1];
  for (let y = 0; y < height; y++)
    for (let x = 0; x < width; x++) {
      if (px[(y * width + x) * 4] < 128) {
        x0 = Math.min(x0, x);
        x1 = Math.max(x1, x);
        y0 = Math.min(y0, y);
        y1 = Math.max(y1, y);
      }
    }
  if (x1 < 0) return null; // nothing drawn
  const [w, h] = [x1 - x0 + 1, y1 - y0 + 1];
  const s = 32 / Math.max(w, h);
  const small = document.createElement("canvas");
  small.width = small.height = 32;
  const g = small.getContext("2d");
  g.fillStyle = "#fff";
  g.fillRect(0, 0, 32, 32);
  g.drawImage(canvas, x0, y0, w, h, (32 - w * s) / 2, (32 - h * s) / 2, w * s, h * s);
  const bits = g.getImageData(0, 0, 32, 32).data;
  const input = new Float32Array(64);
  for (let y = 0; y < 32; y++)
    for (let x = 0; x < 32; x++) {
      if (bits[(y * 32 + x) * 4] < 128) input[(y >> 2) * 8 + (x >> 2)] += 1 / 16;
    }
  return input;
}
