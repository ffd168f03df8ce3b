// bakery view: every bundle under OUT, drawn by three.js through each bundle's generated
// WebGL2 decoder. One WebGL context (three's renderer) renders every view into a render
// target; the pixels go to 2D canvases. window.bakeryView exposes the decodes to tests and
// to `bakery view --snapshot`.
import * as THREE from 'three';

const renderer = new THREE.WebGLRenderer({ antialias: false, alpha: false });
const quadCamera = new THREE.OrthographicCamera(-1, 1, 1, -1, 0, 1);
const quadScene = new THREE.Scene();
const quad = new THREE.Mesh(new THREE.PlaneGeometry(2, 2));
quadScene.add(quad);
const state = { bundles: [], byId: new Map(), cache: new Map(), errors: [] };

const HEADER = 'precision highp float;\nprecision highp int;\nprecision highp usampler2D;\nprecision highp sampler2DArray;\n';

async function fetchOk(url) {
  const r = await fetch(url);
  if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
  return r;
}
const text = async (url) => (await fetchOk(url)).text();
const bytes = async (url) => new Uint8Array(await (await fetchOk(url)).arrayBuffer());
function cached(key, make) {
  if (!state.cache.has(key)) state.cache.set(key, make());
  return state.cache.get(key);
}
const fileUrl = (b, name) => `/bundle/${b.id}/${name}`;

// A file of little-endian 32-bit words as an R32UI texture: texel i = word i, rows in order.
function wordTexture(data) {
  const n = Math.max(1, Math.ceil(data.length / 4));
  const width = Math.min(n, 2048), height = Math.ceil(n / width);
  const words = new Uint32Array(width * height);
  const padded = new Uint8Array(n * 4);
  padded.set(data);
  words.set(new Uint32Array(padded.buffer));
  const t = new THREE.DataTexture(words, width, height, THREE.RedIntegerFormat, THREE.UnsignedIntType);
  t.internalFormat = 'R32UI';
  t.minFilter = t.magFilter = THREE.NearestFilter;
  t.generateMipmaps = false;
  t.needsUpdate = true;
  return t;
}

// A DDS/KTX2 file of the bundle, decoded by the server to RGBA8 levels (every authored
// level as stored: nothing here regenerates mips).
async function textureLevels(b, name) {
  return cached(`levels:${b.id}/${name}`, async () => {
    const data = await bytes(`/level/${b.id}/${name}`);
    const n = new DataView(data.buffer).getUint32(0, true);
    const head = JSON.parse(new TextDecoder().decode(data.subarray(4, 4 + n)));
    let at = 4 + n;
    head.levels = head.level_bytes.map((layers, m) => layers.map((len) => {
      const s = data.slice(at, at + len); at += len; return s;
    }));
    head.sizes = head.levels.map((_, m) => [Math.max(1, head.width >> m), Math.max(1, head.height >> m)]);
    return head;
  });
}

function chainTexture(levels, layer = 0) {
  const [w, h] = levels.sizes[0];
  const t = new THREE.DataTexture(levels.levels[0][layer], w, h, THREE.RGBAFormat, THREE.UnsignedByteType);
  t.mipmaps = levels.levels.map((l, m) => ({ data: l[layer], width: levels.sizes[m][0], height: levels.sizes[m][1] }));
  t.generateMipmaps = false;
  t.minFilter = THREE.LinearMipmapLinearFilter;
  t.magFilter = THREE.LinearFilter;
  t.wrapS = t.wrapT = THREE.RepeatWrapping;
  t.anisotropy = 1;
  t.needsUpdate = true;
  return t;
}

function arrayTexture(levels, mip) {
  const [w, h] = levels.sizes[mip];
  const layers = levels.levels[mip];
  const data = new Uint8Array(w * h * 4 * layers.length);
  layers.forEach((l, i) => data.set(l, i * w * h * 4));
  const t = new THREE.DataArrayTexture(data, w, h, layers.length);
  t.minFilter = t.magFilter = THREE.LinearFilter;
  t.wrapS = t.wrapT = THREE.ClampToEdgeWrapping;
  t.generateMipmaps = false;
  t.needsUpdate = true;
  return t;
}

// Renders a full-screen fragment shader at width x height; returns RGBA8 rows, row 0 at
// gl_FragCoord.y = 0.5 (the shaders put image row 0 there, so rows come out top first).
function renderPixels(material, width, height) {
  quad.material = material;
  return readBack(quadScene, quadCamera, width, height, { depthBuffer: false });
}

// Renders ``scene`` into an offscreen target; returns its RGBA8 rows as GL reads them
// (bottom first).
function readBack(scene, camera, width, height, options = {}) {
  const target = new THREE.WebGLRenderTarget(width, height, options);
  renderer.setRenderTarget(target);
  renderer.render(scene, camera);
  const out = new Uint8Array(width * height * 4);
  renderer.readRenderTargetPixels(target, 0, 0, width, height, out);
  renderer.setRenderTarget(null);
  target.dispose();
  return out;
}

function raw(fragment, uniforms) {
  return new THREE.RawShaderMaterial({
    glslVersion: THREE.GLSL3, uniforms, depthTest: false, depthWrite: false,
    vertexShader: 'in vec3 position;\nvoid main() { gl_Position = vec4(position.xy, 0.0, 1.0); }\n',
    fragmentShader: HEADER + fragment,
  });
}

// Rows top first -> a canvas (optionally upscaled for display).
function toCanvas(pixels, width, height, scale = 1) {
  const c = document.createElement('canvas');
  c.width = width; c.height = height;
  c.style.width = `${width * scale}px`; c.style.height = `${height * scale}px`;
  c.getContext('2d').putImageData(new ImageData(new Uint8ClampedArray(pixels), width, height), 0, 0);
  return c;
}
function flipRows(pixels, width, height) {
  const out = new Uint8Array(pixels.length), row = width * 4;
  for (let y = 0; y < height; y++) out.set(pixels.subarray(y * row, (y + 1) * row), (height - 1 - y) * row);
  return out;
}
const scaleFor = (w) => Math.max(1, Math.floor(256 / w));

// ---- ntc ------------------------------------------------------------------------------
async function ntcDecoder(b) {
  return cached(`ntc:${b.id}`, async () => {
    const ntc = b.manifest.ntc, files = ntc.files;
    if (!files.decoders.webgl || !files.symbol_prefix) throw new Error(`${b.id}: no WebGL decoder in this bundle (baked by an older bakery: re-bake it)`);
    const [source, weights, latents] = await Promise.all([
      text(fileUrl(b, files.decoders.webgl)), bytes(fileUrl(b, files.weights)), bytes(fileUrl(b, files.latents))]);
    const P = files.symbol_prefix, packed = ntc.latents.mode === 'packed';
    return { source, prefix: P, weights: wordTexture(weights), packed,
             latents: packed ? wordTexture(latents) : bc4ArrayTexture(latents, ntc.latents), ntc };
  });
}

// BC4 latents (latents.dds: DX10 header, layer-major, every latent level) uploaded as the
// blocks they are, with their mips: the GPU filters them as an engine's sampler would.
function bc4ArrayTexture(dds, grid) {
  if (!renderer.extensions.has('EXT_texture_compression_rgtc')) throw new Error('this browser has no BC4 (EXT_texture_compression_rgtc)');
  const view = new DataView(dds.buffer, dds.byteOffset);
  const height = view.getUint32(12, true), width = view.getUint32(16, true), levels = Math.max(1, view.getUint32(28, true));
  const layers = view.getUint32(140, true);
  const size = (m) => [Math.max(1, width >> m), Math.max(1, height >> m)];
  const bytesOf = (m) => { const [w, h] = size(m); return Math.ceil(w / 4) * Math.ceil(h / 4) * 8; };
  const layerBytes = Array.from({ length: levels }, (_, m) => bytesOf(m)).reduce((a, c) => a + c, 0);
  const mipmaps = Array.from({ length: levels }, (_, m) => {
    const data = new Uint8Array(bytesOf(m) * layers);
    let offset = 148;
    for (let k = 0; k < m; k++) offset += bytesOf(k);
    for (let l = 0; l < layers; l++) data.set(dds.subarray(offset + l * layerBytes, offset + l * layerBytes + bytesOf(m)), l * bytesOf(m));
    const [w, h] = size(m);
    return { data, width: w, height: h };
  });
  if (layers !== grid.features) throw new Error(`latents.dds has ${layers} layers, the manifest ${grid.features} features`);
  const t = new THREE.CompressedArrayTexture(mipmaps, width, height, layers, THREE.RED_RGTC1_Format);
  t.minFilter = THREE.LinearMipmapNearestFilter;   // the decoder picks each level itself (textureLod)
  t.magFilter = THREE.LinearFilter;
  t.wrapS = t.wrapT = THREE.ClampToEdgeWrapping;
  t.generateMipmaps = false;
  t.needsUpdate = true;
  return t;
}

function ntcUniforms(d, extra) {
  const latents = d.packed ? `${d.prefix}_latent_words` : `${d.prefix}_latents`;
  return { [`${d.prefix}_mlp_weights`]: { value: d.weights }, [latents]: { value: d.latents }, ...extra };
}

// One role of colour mip `mip`, decoded per texel by the bundle's WebGL decoder.
async function decodeNtc(id, role, mip) {
  const b = state.byId.get(id), d = await ntcDecoder(b);
  const [first, count] = d.ntc.material.channels[role];
  const { width, height } = d.ntc.latents.color_mips[mip];
  const P = d.prefix;
  const material = cached(`ntcmat:${id}`, () => raw(d.source + `
uniform uint u_mip;
uniform int u_first;
uniform int u_count;
out vec4 color;
void main()
{
    float o[${P.toUpperCase()}_MLP_N_OUTPUTS];
    ${P}_decode_texel(u_mip, uint(gl_FragCoord.x), uint(gl_FragCoord.y), o);
    ${P}_finish(o);
    vec4 c = vec4(0.0, 0.0, 0.0, 1.0);
    for (int k = 0; k < 4; k++)
        if (k < u_count) c[k] = o[u_first + k];
    color = u_count == 1 ? vec4(c.xxx, 1.0) : c;
}
`, ntcUniforms(d, { u_mip: { value: 0 }, u_first: { value: 0 }, u_count: { value: 1 } })));
  material.uniforms.u_mip.value = mip;
  material.uniforms.u_first.value = first;
  material.uniforms.u_count.value = Math.min(count, 4);
  return { width, height, channels: count, pixels: renderPixels(material, width, height) };
}

// The set on a sphere and a receding plane, lit by a sky/ground environment and the sun:
// every fragment decodes its texels (inference on sample) at the mip its footprint asks for.
async function renderNtcScene(id, width, height, opts) {
  const b = state.byId.get(id), d = await ntcDecoder(b), P = d.prefix, ntc = d.ntc;
  const ch = ntc.material.channels;
  const at = (r, k, dflt) => (ch[r] ? `o[${ch[r][0] + k}]` : dflt);
  const material = cached(`ntcscene:${id}`, () => new THREE.ShaderMaterial({
    glslVersion: THREE.GLSL3,
    uniforms: ntcUniforms(d, { u_mip: { value: -1 }, u_role: { value: -1 }, u_sun: { value: new THREE.Vector3(0.5, 0.8, 0.4).normalize() } }),
    vertexShader: `
out vec2 v_uv; out vec3 v_normal; out vec3 v_pos;
void main() {
  v_uv = uv; v_normal = normalize(normalMatrix * normal);
  vec4 p = modelViewMatrix * vec4(position, 1.0); v_pos = p.xyz;
  gl_Position = projectionMatrix * p;
}`,
    fragmentShader: HEADER + d.source + `
in vec2 v_uv; in vec3 v_normal; in vec3 v_pos;
uniform int u_mip; uniform int u_role; uniform vec3 u_sun;
out vec4 color;
vec3 srgbToLinear(vec3 c) { return mix(pow((c + 0.055) / 1.055, vec3(2.4)), c / 12.92, vec3(lessThanEqual(c, vec3(0.04045)))); }
vec3 linearToSrgb(vec3 c) { return mix(1.055 * pow(max(c, vec3(0.0031308)), vec3(1.0 / 2.4)) - 0.055, 12.92 * c, vec3(lessThanEqual(c, vec3(0.0031308)))); }
void main() {
  vec2 uv = fract(v_uv);
  int mips = int(${P.toUpperCase()}_MIPS);
  vec2 size0 = vec2(float(${ntc.material.width}), float(${ntc.material.height}));
  vec2 dx = dFdx(v_uv * size0), dy = dFdy(v_uv * size0);
  float lod = 0.5 * log2(max(max(dot(dx, dx), dot(dy, dy)), 1e-8));
  int mip = u_mip >= 0 ? u_mip : clamp(int(floor(lod + 0.5)), 0, mips - 1);
  uint w = ${P}_mip_width(uint(mip)), h = ${P}_mip_height(uint(mip));
  uint px = min(uint(uv.x * float(w)), w - 1u), py = min(uint(uv.y * float(h)), h - 1u);
  float o[${P.toUpperCase()}_MLP_N_OUTPUTS];
  ${P}_decode_texel(uint(mip), px, py, o);
  ${P}_finish(o);
  vec3 albedo = srgbToLinear(vec3(${at('albedo', 0, '0.6')}, ${at('albedo', 1, '0.6')}, ${at('albedo', 2, '0.6')}));
  vec3 tn = vec3(${at('normal', 0, '0.5')}, ${at('normal', 1, '0.5')}, ${at('normal', 2, '1.0')}) * 2.0 - 1.0;
  float rough = ${at('roughness', 0, '0.6')}, metal = ${at('metalness', 0, '0.0')}, ao = ${at('ao', 0, '1.0')};
  // tangent frame from screen derivatives of position and uv
  vec3 q0 = dFdx(v_pos), q1 = dFdy(v_pos); vec2 st0 = dFdx(v_uv), st1 = dFdy(v_uv);
  vec3 N0 = normalize(v_normal);
  vec3 T = normalize(q0 * st1.t - q1 * st0.t), B = normalize(-q0 * st1.s + q1 * st0.s);
  vec3 n = normalize(mat3(T, B, N0) * normalize(tn));
  vec3 V = normalize(-v_pos), L = normalize((viewMatrix * vec4(u_sun, 0.0)).xyz), H = normalize(L + V);
  float a = max(rough * rough, 0.02), a2 = a * a;
  float nl = max(dot(n, L), 0.0), nv = max(dot(n, V), 1e-3), nh = max(dot(n, H), 0.0);
  float dd = nh * nh * (a2 - 1.0) + 1.0, D = a2 / (3.14159 * dd * dd);
  float k = a / 2.0, G = nl / (nl * (1.0 - k) + k) * nv / (nv * (1.0 - k) + k);
  vec3 F0 = mix(vec3(0.04), albedo, metal), F = F0 + (1.0 - F0) * pow(1.0 - max(dot(H, V), 0.0), 5.0);
  vec3 spec = D * G * F / (4.0 * nv + 1e-4);
  vec3 diffuse = (1.0 - F) * (1.0 - metal) * albedo / 3.14159;
  vec3 up = (viewMatrix * vec4(0.0, 1.0, 0.0, 0.0)).xyz;
  vec3 sky = mix(vec3(0.18, 0.16, 0.14), vec3(0.45, 0.55, 0.75), 0.5 + 0.5 * dot(n, up));
  vec3 lit = (diffuse + spec) * nl * 3.0 + sky * ao * mix(albedo * (1.0 - metal), F0, 0.5);
  vec3 shown = lit / (1.0 + lit);
  if (u_role >= 0) {
    int r = u_role;
    shown = vec3(o[r], o[min(r + 1, int(${P.toUpperCase()}_MLP_N_OUTPUTS) - 1)], o[min(r + 2, int(${P.toUpperCase()}_MLP_N_OUTPUTS) - 1)]);
  }
  color = vec4(u_role >= 0 ? shown : linearToSrgb(shown), 1.0);
}`,
  }));
  material.uniforms.u_mip.value = opts.mip ?? -1;
  material.uniforms.u_role.value = opts.roleChannel ?? -1;
  const scene = new THREE.Scene();
  scene.background = new THREE.Color(0x202328);
  const sphere = new THREE.Mesh(new THREE.SphereGeometry(0.8, 64, 32), material);
  sphere.position.set(-1.05, 0.35, 0);
  const plane = new THREE.Mesh(new THREE.PlaneGeometry(2.2, 6, 1, 1), material);
  plane.rotation.x = -Math.PI / 2.15;
  plane.position.set(1.2, -0.2, -1.6);
  plane.geometry.attributes.uv.array.forEach((v, i, a) => { a[i] = v * (i % 2 ? 4 : 1.5); });
  scene.add(sphere, plane);
  const camera = new THREE.PerspectiveCamera(40, width / height, 0.1, 50);
  camera.position.set(0, 0.9, 3.6);
  camera.lookAt(0, 0, -0.5);
  return flipRows(readBack(scene, camera, width, height), width, height);
}

function select(label, options, onChange) {
  const l = document.createElement('label');
  l.textContent = `${label} `;
  const s = document.createElement('select');
  options.forEach(([v, t]) => { const o = document.createElement('option'); o.value = v; o.textContent = t; s.append(o); });
  s.addEventListener('change', () => onChange(s.value));
  l.append(s);
  return [l, s];
}

function figure(node, caption) {
  const f = document.createElement('figure');
  const c = document.createElement('figcaption');
  c.textContent = caption;
  f.append(node, c);
  return f;
}

function image(b, name, caption) {
  const img = document.createElement('img');
  img.className = 'view';
  img.src = fileUrl(b, name);
  img.style.width = '256px';
  return figure(img, caption);
}

async function viewNtc(b, el) {
  const ntc = b.manifest.ntc, roles = ntc.material.roles;
  const controls = document.createElement('div');
  controls.className = 'controls';
  const row = document.createElement('div');
  row.className = 'row';
  const scene = document.createElement('div'), flat = document.createElement('div');
  row.append(scene, flat);
  let role = roles[0], mip = 0, sceneMip = -1, split = 0.5;
  // the right side of the split at mip 0: the source and the BCn baseline where the bake
  // kept them (baseline = true), else the bundle's own preview
  const refs = ntc.files.references;
  const sides = refs ? [['source', refs.source, 'source'], ['baseline', refs.baseline, 'BCn baseline'],
                        ['preview', 'preview_{role}.png', 'bundle preview']]
                     : [['preview', 'preview_{role}.png', 'bundle preview']];
  let side = sides[0];
  const [roleLabel] = select('role', roles.map((r) => [r, r]), (v) => { role = v; draw(); });
  const [sideLabel] = select('against', sides.map(([k, , t]) => [k, t]), (v) => { side = sides.find((x) => x[0] === v); draw(); });
  const [mipLabel] = select('mip', ntc.latents.color_mips.map((m, i) => [i, `${i}: ${m.width}x${m.height}`]), (v) => { mip = +v; draw(); });
  const [sceneLabel] = select('scene mip', [[-1, 'auto'], ...ntc.latents.color_mips.map((m, i) => [i, `${i}`])], (v) => { sceneMip = +v; drawScene(); });
  const slider = document.createElement('input');
  Object.assign(slider, { type: 'range', min: 0, max: 100, value: 50 });
  slider.addEventListener('input', () => { split = slider.value / 100; draw(); });
  const sliderLabel = document.createElement('label');
  sliderLabel.append('split: WebGL decode | ', slider);
  controls.append(roleLabel, mipLabel, sideLabel, sliderLabel, sceneLabel);
  const base = ntc.baseline;
  if (base) {   // the result next to what a studio ships today: BCn at full size and at equal bytes
    const t = document.createElement('table');
    t.className = 'metrics';
    const head = t.insertRow();
    ['PSNR dB', 'ntc', `BCn (${base.total.bpp} bpp)`, `BCn at ntc's bytes`].forEach((h) => { head.insertCell().textContent = h; });
    for (const r of roles) {
      const bt = base.textures[r] || {};
      const tr = t.insertRow();
      [r, b.metrics.psnr_db[r], bt.psnr, bt.same_bytes_psnr].forEach((v) => {
        tr.insertCell().textContent = typeof v === 'number' ? v.toFixed(2) : (v ?? '');
      });
    }
    el.append(t);
  }
  el.append(controls, row);
  async function drawScene() {
    const w = 480, h = 300;
    const px = await renderNtcScene(b.id, w, h, { mip: sceneMip });
    scene.replaceChildren(figure(toCanvas(px, w, h), 'sphere and receding plane, decoded per fragment (WebGL2 decoder)'));
  }
  async function draw() {
    const r = await decodeNtc(b.id, role, mip);
    const s = scaleFor(r.width);
    const canvas = toCanvas(r.pixels, r.width, r.height, s);
    const right = side[1].replace('{role}', role);
    if (mip === 0) {   // the right side of the split (mip 0 only: the references have no mips)
      const img = new Image();
      img.src = fileUrl(b, right);
      await img.decode();
      const cut = Math.round(split * r.width);
      canvas.getContext('2d').drawImage(img, cut, 0, r.width - cut, r.height, cut, 0, r.width - cut, r.height);
    }
    canvas.dataset.role = role;
    flat.replaceChildren(figure(canvas, `${role}, mip ${mip} (${r.width}x${r.height}): WebGL decode${mip === 0 ? ` | ${side[2]} (${right})` : ''}`));
  }
  await Promise.all([drawScene(), draw()]);
}

// ---- neural_material ------------------------------------------------------------------
async function materialDecoder(b) {
  return cached(`nm:${b.id}`, async () => {
    if (!b.files['material_eval.webgl.glsl']) throw new Error(`${b.id}: no WebGL decoder in this bundle (baked by an older bakery: re-bake it)`);
    const [source, weights, levels] = await Promise.all([
      text(fileUrl(b, 'material_eval.webgl.glsl')), bytes(fileUrl(b, 'weights.bin')), textureLevels(b, 'latents.dds')]);
    const prefix = b.manifest.networks.decoder.shader_prefix;
    return { source, prefix, weights: wordTexture(weights), levels, arrays: new Map() };
  });
}

// The decoder evaluated per pixel over the latents of mip `mip`, lit by one (wi, wo) in the
// tangent frame, shown as the manifest's evaluation displays it.
async function renderMaterial(id, wi, wo, mip = 0) {
  const b = state.byId.get(id), d = await materialDecoder(b);
  const P = `${d.prefix}_material`;
  if (!d.arrays.has(mip)) d.arrays.set(mip, arrayTexture(d.levels, mip));
  const [width, height] = d.levels.sizes[mip];
  const material = cached(`nmmat:${id}`, () => raw(d.source + `
uniform vec3 u_wi; uniform vec3 u_wo; uniform vec2 u_size;
out vec4 color;
void main() {
  vec2 uv = gl_FragCoord.xy / u_size;
  color = vec4(${P}_display(${P}_eval(uv, 0.0, normalize(u_wi), normalize(u_wo))), 1.0);
}`, { [`${P}_mlp_weights`]: { value: d.weights }, [`${P}_latents`]: { value: null },
      u_wi: { value: new THREE.Vector3() }, u_wo: { value: new THREE.Vector3() }, u_size: { value: new THREE.Vector2() } }));
  material.uniforms[`${P}_latents`].value = d.arrays.get(mip);
  material.uniforms.u_wi.value.set(...wi);
  material.uniforms.u_wo.value.set(...wo);
  material.uniforms.u_size.value.set(width, height);
  return { width, height, pixels: renderPixels(material, width, height) };
}

async function viewMaterial(b, el) {
  const ev = b.manifest.neural_material.evaluation;
  const row = document.createElement('div');
  row.className = 'row';
  el.append(row);
  const shown = Math.min(3, ev.directions.length);
  for (let k = 0; k < shown; k++) {
    const j = Math.floor(k * (ev.directions.length - 1) / 2);
    const [wi, wo] = ev.directions[j];
    const r = await renderMaterial(b.id, wi, wo);
    row.append(figure(toCanvas(r.pixels, r.width, r.height, scaleFor(r.width)), `decoder in WebGL, view ${j} (PSNR ${ev.psnr_db_per_direction[j]} dB in the bake)`));
    if (b.files[`preview_${k}.png`]) row.append(image(b, `preview_${k}.png`, `teacher | student (bake), view ${j}`));
  }
}

// ---- mipmap ---------------------------------------------------------------------------
// Level `level` of a texture file, drawn by sampling the uploaded chain at that level.
async function mipLevel(id, name, level) {
  const b = state.byId.get(id);
  const levels = await textureLevels(b, name);
  const tex = cached(`chain:${id}/${name}`, () => chainTexture(levels));
  const [width, height] = levels.sizes[level];
  const material = cached('mipmat', () => raw(`
uniform sampler2D u_tex; uniform int u_level;
out vec4 color;
void main() { color = texelFetch(u_tex, ivec2(gl_FragCoord.xy), u_level); }`, { u_tex: { value: null }, u_level: { value: 0 } }));
  material.uniforms.u_tex.value = tex;
  material.uniforms.u_level.value = level;
  return { width, height, pixels: renderPixels(material, width, height) };
}

function boxChain(levels) {   // the 2x2 box chain from level 0, the baseline the trained chain beats
  const out = { ...levels, levels: [levels.levels[0]] };
  for (let m = 1; m < levels.levels.length; m++) {
    const [pw, ph] = levels.sizes[m - 1], [w, h] = levels.sizes[m], src = out.levels[m - 1][0], dst = new Uint8Array(w * h * 4);
    for (let y = 0; y < h; y++) for (let x = 0; x < w; x++) for (let c = 0; c < 4; c++) {
      let s = 0;
      for (const [dx, dy] of [[0, 0], [1, 0], [0, 1], [1, 1]]) s += src[(Math.min(2 * y + dy, ph - 1) * pw + Math.min(2 * x + dx, pw - 1)) * 4 + c];
      dst[(y * w + x) * 4 + c] = Math.round(s / 4);
    }
    out.levels.push([dst]);
  }
  return out;
}

async function recedingPlane(tex, width, height) {
  const scene = new THREE.Scene();
  const plane = new THREE.Mesh(new THREE.PlaneGeometry(2, 12), new THREE.MeshBasicMaterial({ map: tex }));
  plane.rotation.x = -Math.PI / 2;
  plane.geometry.attributes.uv.array.forEach((v, i, a) => { a[i] = v * (i % 2 ? 12 : 2); });
  scene.add(plane);
  const camera = new THREE.PerspectiveCamera(50, width / height, 0.05, 50);
  camera.position.set(0, 0.35, 5.8);
  camera.lookAt(0, 0, -2);
  return flipRows(readBack(scene, camera, width, height), width, height);
}

// The baseline chains the trained one is shown against, by texture: the box chain (made
// here from level 0) and, where the bundle ships it, the Toksvig chain (`toksvig_<name>`).
function mipBaselines(b, name) {
  return [['box', 'box'], ...(b.files[`toksvig_${name}`] === 'baseline' ? [['toksvig', 'Toksvig']] : [])];
}

// Level `level` of baseline `kind` of texture `name`, as the view draws it.
async function mipBaseline(id, name, kind, level) {
  const b = state.byId.get(id);
  if (kind === 'toksvig') return mipLevel(id, `toksvig_${name}`, level);
  const levels = await textureLevels(b, name);
  const box = cached(`box:${id}/${name}`, () => boxChain(levels));
  const [width, height] = levels.sizes[level];
  return { width, height, pixels: box.levels[level][0] };
}

async function baselineChain(b, name, kind) {
  if (kind === 'toksvig') return chainTexture(await textureLevels(b, `toksvig_${name}`));
  const levels = await textureLevels(b, name);
  return chainTexture(cached(`box:${b.id}/${name}`, () => boxChain(levels)));
}

async function viewMipmap(b, el) {
  const names = Object.keys(b.files).filter((n) => n.endsWith('.dds') && b.files[n] !== 'baseline');
  for (const name of names) {
    const levels = await textureLevels(b, name);
    const kinds = mipBaselines(b, name);
    const wrap = document.createElement('div');
    wrap.dataset.texture = name;
    const h = document.createElement('h3');
    h.textContent = `${name} (${levels.format}, ${levels.levels.length} levels)`;
    const row = document.createElement('div');
    row.className = 'row';
    const planes = document.createElement('div');
    planes.className = 'row';
    const w = 260, ht = 170;
    const trainedPlane = figure(toCanvas(await recedingPlane(chainTexture(levels), w, ht), w, ht), 'trained chain on a receding plane');
    let level = Math.min(1, levels.levels.length - 1), kind = 'box';
    const [label, levelSelect] = select('level', levels.levels.map((_, m) => [m, `${m}: ${levels.sizes[m].join('x')}`]), (v) => { level = +v; draw(); });
    const [kindLabel] = select('against', kinds, (v) => { kind = v; draw(); });
    levelSelect.value = String(level);
    async function draw() {
      wrap.dataset.drawn = '';
      const shown = `${kind}:${level}`, caption = kinds.find(([k]) => k === kind)[1];
      const [r, base, plane] = await Promise.all([mipLevel(b.id, name, level), mipBaseline(b.id, name, kind, level),
        cached(`plane:${b.id}/${name}:${kind}`, async () => recedingPlane(await baselineChain(b, name, kind), w, ht))]);
      if (shown !== `${kind}:${level}`) return;   // a later choice is drawing
      const s = scaleFor(r.width), baseCanvas = toCanvas(base.pixels, base.width, base.height, s);
      baseCanvas.dataset.chain = kind;
      planes.replaceChildren(trainedPlane, figure(toCanvas(plane, w, ht), `${caption} chain (baseline)`));
      row.replaceChildren(figure(toCanvas(r.pixels, r.width, r.height, s), `trained, level ${level}`),
        figure(baseCanvas, `${caption}, level ${level}`));
      wrap.dataset.drawn = shown;
    }
    const controls = document.createElement('div');
    controls.className = 'controls';
    controls.append(label, kindLabel);
    wrap.append(h, planes, controls, row);
    el.append(wrap);
    await draw();
  }
}

// ---- neural_texture / procedural / fit ------------------------------------------------
async function decodeTexture(id) {   // neural_texture: the MLP from UV, in WebGL
  const b = state.byId.get(id);
  const net = b.manifest.networks.decoder, P = net.shader_prefix, src = b.manifest.source;
  const [source, weights] = await Promise.all([text(fileUrl(b, 'decoder.webgl.glsl')), bytes(fileUrl(b, 'weights.bin'))]);
  const n = src.channels;
  const material = raw(source + `
uniform vec2 u_size;
out vec4 color;
void main() {
  float x[${P.toUpperCase()}_N_INPUTS];
  x[0] = gl_FragCoord.x / u_size.x; x[1] = gl_FragCoord.y / u_size.y;
  float y[${P.toUpperCase()}_N_OUTPUTS];
  ${P}_decode(x, y);
  vec4 c = vec4(0.0, 0.0, 0.0, 1.0);
  for (int k = 0; k < ${Math.min(n, 4)}; k++) c[k] = clamp(y[k], 0.0, 1.0);
  color = ${n === 1 ? 'vec4(c.xxx, 1.0)' : 'c'};
}`, { [`${P}_weights`]: { value: wordTexture(weights) }, u_size: { value: new THREE.Vector2(src.width, src.height) } });
  return { width: src.width, height: src.height, pixels: renderPixels(material, src.width, src.height) };
}

async function viewImages(b, el) {
  const row = document.createElement('div');
  row.className = 'row';
  el.append(row);
  if (b.type === 'neural_texture' && b.files['decoder.webgl.glsl']) {
    const r = await decodeTexture(b.id);
    row.append(figure(toCanvas(r.pixels, r.width, r.height, scaleFor(r.width)), 'decoded in WebGL (decoder.webgl.glsl)'));
  }
  const shown = { neural_texture: ['preview.png', 'reference.png', 'difference.png'],
                  procedural: ['render.png', 'target.png', 'difference.png', 'tile3x3.png'],
                  fit: ['render.png', 'reference.png', 'difference.png'] }[b.type] || [];
  for (const name of shown) if (b.files[name]) row.append(image(b, name, name));
}

// ---- the page -------------------------------------------------------------------------
const VIEWS = { ntc: viewNtc, neural_material: viewMaterial, mipmap: viewMipmap,
                neural_texture: viewImages, procedural: viewImages, fit: viewImages };

function metricsTable(metrics, names = {}) {
  const t = document.createElement('table');
  t.className = 'metrics';
  const flat = (o, p = '') => Object.entries(o).flatMap(([k, v]) => (v && typeof v === 'object' ? flat(v, `${p}${k}.`) : [[`${p}${k}`, v]]));
  for (const [k, v] of flat(metrics)) {
    if (v === null) continue;  // a metric a stage leaves unmeasured
    const tr = t.insertRow();
    const [label, what] = names[k] || [k, ''];
    const name = tr.insertCell();
    name.textContent = label;
    name.title = what ? `${what} (${k})` : k;
    tr.insertCell().textContent = typeof v === 'number' ? String(Math.round(v * 1000) / 1000) : String(v);
  }
  return t;
}

async function main() {
  const doc = await (await fetchOk('/api/bundles.json')).json();
  state.bundles = doc.bundles;
  doc.bundles.forEach((b) => state.byId.set(b.id, b));
  document.getElementById('where').textContent = `${doc.bundles.length} bundles in ${doc.out}/`;
  const main = document.getElementById('bundles');
  for (const p of doc.problems) {
    const e = document.createElement('p'); e.className = 'error'; e.textContent = p; main.append(e);
  }
  const done = [];
  for (const b of doc.bundles) {
    const s = document.createElement('section');
    s.className = 'bundle';
    s.id = `bundle-${b.id.replace(/[^A-Za-z0-9]+/g, '-')}`;
    s.dataset.bundle = b.id;
    const h = document.createElement('h2');
    h.textContent = b.id;
    const kind = document.createElement('span'); kind.className = 'kind'; kind.textContent = b.type;
    h.append(kind);
    s.append(h, metricsTable(b.metrics, b.metric_names));
    main.append(s);
    const view = VIEWS[b.type];
    done.push(view ? view(b, s).catch((e) => {
      const p = document.createElement('p'); p.className = 'error'; p.textContent = String(e.message || e); s.append(p);
      state.errors.push(`${b.id}: ${e.message || e}`);
    }) : Promise.resolve());
  }
  await Promise.all(done);
}

window.bakeryView = {
  ready: main().then(() => { document.getElementById('status').textContent = state.errors.length ? `${state.errors.length} errors` : 'ready'; }),
  state, decodeNtc, renderMaterial, mipLevel, mipBaseline, decodeTexture,
  // pixel arrays cross into Playwright as base64
  b64: (u8) => { let s = ''; for (let i = 0; i < u8.length; i += 0x8000) s += String.fromCharCode(...u8.subarray(i, i + 0x8000)); return btoa(s); },
};
