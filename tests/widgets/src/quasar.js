// Vue 3 + Quasar apps whose state lives on the server and comes back over a WebSocket
// (`/ws/{widget}` of the page server): what a click changes shows only once the server has
// answered, hundreds of milliseconds later. The page's `data-app` picks the app:
//   - order: a "Gift wrap" QCheckbox and a "Show cancelled orders" QToggle (div role=checkbox /
//     role=switch, their state set by the server 300 ms after a click) and "Place order";
//   - shipments: a QTable with a selection box per row and "Archive selected" (the server
//     answers 400 ms later); embedded in an iframe of another origin or site by framehost.html;
//   - availability: "Checking availability…" with a QSpinner for 2.5 s, then a room to book.
import { createApp, h, ref, reactive } from 'vue';
import { Quasar, QBtn, QCheckbox, QSpinner, QTable, QToggle } from 'quasar';
import 'quasar/dist/quasar.css';

function socket(widget, onMessage) {
  const ws = new WebSocket((location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/ws/' + widget);
  const queue = [];
  ws.onopen = () => {
    for (const m of queue.splice(0)) ws.send(m);
  };
  ws.onmessage = (event) => onMessage(JSON.parse(event.data));
  return (message) => {
    const text = JSON.stringify(message);
    if (ws.readyState === 1) ws.send(text);
    else queue.push(text);
  };
}

const OrderApp = {
  setup() {
    const state = reactive({ gift: false, cancelled: false });
    const placed = ref('');
    const send = socket('quasar-order', (m) => {
      if (m.state) Object.assign(state, m.state);
      if (m.placed) placed.value = m.placed;
    });
    return () =>
      h('div', { class: 'q-pa-md', style: 'max-width: 480px' }, [
        h('h1', { class: 'text-h5' }, 'Your order'),
        h('p', 'Noise-cancelling headphones, 1 × €249'),
        h(QToggle, {
          modelValue: state.cancelled,
          label: 'Show cancelled orders',
          'onUpdate:modelValue': () => send({ op: 'toggle', field: 'cancelled' }),
        }),
        state.cancelled ? h('p', 'Order 1001 (cancelled): USB cable') : null,
        h('div', [
          h(QCheckbox, {
            modelValue: state.gift,
            label: 'Gift wrap',
            'onUpdate:modelValue': () => send({ op: 'toggle', field: 'gift' }),
          }),
        ]),
        h(QBtn, { color: 'primary', label: 'Place order', onClick: () => send({ op: 'place' }) }),
        placed.value ? h('p', { class: 'q-mt-md' }, 'Order placed: ' + placed.value) : null,
      ]);
  },
};

const SHIPMENTS = [
  { id: 'SHP-1', city: 'Lisbon', weight: '2 kg' },
  { id: 'SHP-2', city: 'Oslo', weight: '5 kg' },
  { id: 'SHP-3', city: 'Turin', weight: '1 kg' },
];

const ShipmentsApp = {
  setup() {
    const selected = ref([]);
    const archived = ref('');
    const send = socket('quasar-shipments', (m) => {
      if (m.archived !== undefined) archived.value = 'Archived ' + m.archived + ' shipment(s)';
    });
    return () =>
      h('div', { class: 'q-pa-sm' }, [
        h(QTable, {
          title: 'Shipments',
          rows: SHIPMENTS,
          rowKey: 'id',
          columns: [
            { name: 'id', label: 'Shipment', field: 'id', align: 'left' },
            { name: 'city', label: 'Destination', field: 'city', align: 'left' },
            { name: 'weight', label: 'Weight', field: 'weight', align: 'left' },
          ],
          selection: 'multiple',
          selected: selected.value,
          'onUpdate:selected': (rows) => {
            selected.value = rows;
          },
          hidePagination: true,
          flat: true,
          dense: true,
        }),
        h(QBtn, {
          color: 'negative',
          label: 'Archive selected',
          onClick: () => send({ op: 'archive', ids: selected.value.map((r) => r.id) }),
        }),
        archived.value ? h('p', { class: 'q-mt-sm' }, archived.value) : null,
      ]);
  },
};

const AvailabilityApp = {
  setup() {
    const checking = ref(true);
    const booked = ref('');
    const send = socket('quasar-availability', (m) => {
      if (m.booked) booked.value = m.booked;
    });
    setTimeout(() => {
      checking.value = false;
    }, 2500);
    return () =>
      h('div', { class: 'q-pa-md' }, [
        h('h1', { class: 'text-h5' }, 'Harbour Hotel, 12–14 March'),
        checking.value
          ? h('div', { class: 'row items-center q-gutter-sm' }, [h(QSpinner, { size: '1.5em' }), h('span', 'Checking availability…')])
          : h('div', [
              h('p', 'Sea-view double room: available, €140 a night'),
              h(QBtn, { color: 'primary', label: 'Book sea-view room', onClick: () => send({ op: 'book', room: 'sea-view' }) }),
            ]),
        booked.value ? h('p', 'Booked: ' + booked.value) : null,
      ]);
  },
};

const apps = { order: OrderApp, shipments: ShipmentsApp, availability: AvailabilityApp };
const root = document.getElementById('app');
createApp(apps[root.dataset.app]).use(Quasar, {}).mount(root);
