// Shoelace web components: everything interactive lives in shadow roots; sl-select opens a
// listbox of sl-option elements, sl-input wraps a native input in its shadow root.
import '@shoelace-style/shoelace/dist/themes/light.css';
import { setBasePath } from '@shoelace-style/shoelace/dist/utilities/base-path.js';
import '@shoelace-style/shoelace/dist/components/button/button.js';
import '@shoelace-style/shoelace/dist/components/checkbox/checkbox.js';
import '@shoelace-style/shoelace/dist/components/input/input.js';
import '@shoelace-style/shoelace/dist/components/option/option.js';
import '@shoelace-style/shoelace/dist/components/select/select.js';
import { report } from './report.js';

setBasePath('/dist/shoelace');
document.getElementById('save').addEventListener('click', async () => {
  const value = {
    email: document.getElementById('email').value,
    plan: document.getElementById('plan').value,
    terms: document.getElementById('terms').checked,
  };
  document.getElementById('saved').textContent = 'Saved: ' + (await report('shoelace', value));
});
